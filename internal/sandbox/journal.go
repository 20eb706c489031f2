package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// LogEntry is one line of a sandbox's log, E2B's SandboxLogEntry.
// Fields["source"] says whose line it is: "agent" (the sandbox's own
// agent: its start, each process started and ended, its warnings and
// errors, as envd logs them) or "spaced" (the sandbox's lifecycle: created,
// paused, resumed, timeout changed, ended).
type LogEntry struct {
	Time    time.Time
	Level   string // debug, info, warn or error
	Message string
	Fields  map[string]string
}

// LogQuery selects log lines, as E2B's GET /v2/sandboxes/{id}/logs does.
type LogQuery struct {
	// Cursor bounds the lines: at or after it going forward, at or before
	// it going backward; zero is no bound.
	Cursor time.Time
	// Backward returns the newest lines first.
	Backward bool
	// Limit caps the number of lines (0: all).
	Limit int
	// Level is the lowest level returned ("": all).
	Level string
	// Search keeps the lines whose message contains it (case-sensitive).
	Search string
}

// journal keeps each sandbox's log: lifecycle lines from the store's
// change feed, and its agent's lines, read every interval (and before
// every read) while it runs, so that they outlive a pause or the end.
type journal struct {
	svc *Service
	// targets finds a running sandbox's agent; feed is the sandboxes'
	// changes.
	targets  *Targets
	feed     *Feed
	interval time.Duration
	client   *http.Client

	mu   sync.Mutex
	logs map[string]*sandboxLog
	// lines publishes every line as it is kept, under its sandbox's id
	// (FollowLogs).
	lines feed[LogEntry]
}

type sandboxLog struct {
	// lines are the kept lines, oldest first, at most logLines of them
	// holding at most logBytes.
	lines []LogEntry
	bytes int
	// The agent's boot id and the last of its lines read: a sandbox
	// booted afresh (on a saved disk) has a new agent, numbering from 1.
	boot string
	seq  uint64
	// last is the record as the feed last showed it.
	last *Sandbox
	pull sync.Mutex
}

func newJournal(svc *Service, interval time.Duration) *journal {
	return &journal{svc: svc, targets: NewTargets(svc), feed: NewFeed(svc.store), interval: interval, logs: map[string]*sandboxLog{}}
}

func (j *journal) log(id string) *sandboxLog {
	j.mu.Lock()
	defer j.mu.Unlock()
	l, ok := j.logs[id]
	if !ok {
		l = &sandboxLog{}
		j.logs[id] = l
	}
	return l
}

func (j *journal) forget(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.logs, id)
	j.lines.end(id)
}

func (j *journal) add(id string, e LogEntry) {
	l := j.log(id)
	j.mu.Lock()
	defer j.mu.Unlock()
	l.push(e)
	j.lines.publish(id, e)
}

// push keeps e and drops the oldest lines beyond the bounds (j.mu held).
func (l *sandboxLog) push(e LogEntry) {
	l.lines = append(l.lines, e)
	l.bytes += entrySize(e)
	drop := 0
	for len(l.lines)-drop > logLines || (l.bytes > logBytes && drop < len(l.lines)-1) {
		l.bytes -= entrySize(l.lines[drop])
		drop++
	}
	if drop > 0 {
		clear(l.lines[:drop])
		l.lines = l.lines[drop:]
	}
}

// entrySize is about what e holds in memory.
func entrySize(e LogEntry) int {
	n := 64 + len(e.Level) + len(e.Message)
	for k, v := range e.Fields {
		n += 32 + len(k) + len(v)
	}
	return n
}

// follow turns the store's sandbox changes into lifecycle lines, and calls
// gone for each sandbox whose record is removed.
func (j *journal) follow(ctx context.Context, gone func(id string)) {
	seq, err := j.feed.ChangesNow()
	if err != nil {
		j.svc.log.Warn("sandbox logs will have no lifecycle lines", "err", err)
		return
	}
	// The sandboxes there already (found again after a restart) are
	// known as they are: their next change is not their creation.
	if sbs, err := j.svc.List(ctx, ListFilter{}); err == nil {
		for _, sb := range sbs {
			l := j.log(sb.ID)
			j.mu.Lock()
			l.last = sb
			j.mu.Unlock()
		}
	}
	for ctx.Err() == nil {
		changes, next, reset, err := j.feed.Changes(ctx, seq)
		if err != nil {
			if ctx.Err() == nil {
				j.svc.log.Warn("follow sandbox changes for their logs", "err", err)
				time.Sleep(time.Second)
			}
			continue
		}
		if reset {
			// Changes were lost: what they said is lost too.
			if seq, err = j.feed.ChangesNow(); err != nil {
				return
			}
			continue
		}
		for _, c := range changes {
			if c.Removed {
				gone(c.Sandbox.ID)
				continue
			}
			j.observe(c.Sandbox)
		}
		seq = next
	}
}

// observe writes what changed between the record as last seen and sb.
func (j *journal) observe(sb *Sandbox) {
	l := j.log(sb.ID)
	j.mu.Lock()
	prev := l.last
	l.last = sb
	j.mu.Unlock()
	line := func(level, msg string, kv ...string) {
		f := map[string]string{"source": "spaced", "state": string(sb.State)}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				f[kv[i]] = kv[i+1]
			}
		}
		j.add(sb.ID, LogEntry{Time: time.Now().UTC(), Level: level, Message: msg, Fields: f})
	}
	var was State
	if prev != nil {
		was = prev.State
	}
	switch {
	case sb.State == was && sb.State == StateRunning && !sb.ExpiresAt.Equal(prev.ExpiresAt):
		line("info", "Sandbox timeout changed", "end_at", sb.ExpiresAt.Format(time.RFC3339))
	case sb.State == was:
	case sb.State == StateRunning && (was == StatePaused || was == StateResuming):
		line("info", "Sandbox resumed", "end_at", sb.ExpiresAt.Format(time.RFC3339))
	case sb.State == StateRunning:
		line("info", "Sandbox created", "template", sb.Template, "cpu_count", strconv.Itoa(sb.CPU),
			"memory_mb", strconv.Itoa(sb.MemoryMB), "disk_mb", strconv.Itoa(sb.DiskMB), "end_at", sb.ExpiresAt.Format(time.RFC3339))
	case sb.State == StatePaused:
		kept := "memory"
		if sb.Checkpoint != nil && sb.Checkpoint.DiskOnly {
			kept = "disk"
		}
		line("info", "Sandbox paused", "reason", sb.Reason, "kept", kept)
	case sb.State == StateKilled:
		line("info", "Sandbox killed", "reason", sb.Reason)
	case sb.State == StateLost:
		line("error", "Sandbox lost", "reason", sb.Reason)
	}
}

// pullLoop reads the running sandboxes' new agent lines every interval.
func (j *journal) pullLoop(ctx context.Context) {
	t := time.NewTicker(j.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, tg := range j.svc.runningTargets() {
				// A frozen sandbox's agent writes nothing, and a read
				// would fail (withoutWaking): not asked until it wakes.
				if tg.frozen {
					continue
				}
				j.pull(ctx, tg.id)
			}
		}
	}
}

// agentLogs is the agent's GET /logs (internal/agent.Logs).
type agentLogs struct {
	Boot string      `json:"boot"`
	Logs []agentLine `json:"logs"`
}

// pull reads sandbox id's new agent lines, if it runs; a failure leaves the
// log as it was (the lines are read again next time).
func (j *journal) pull(ctx context.Context, id string) {
	ac, err := j.targets.Agent(id)
	if err != nil {
		return
	}
	l := j.log(id)
	l.pull.Lock()
	defer l.pull.Unlock()
	j.mu.Lock()
	boot, after := l.boot, l.seq
	j.mu.Unlock()
	// Reading the log is spaced's own business: it neither wakes a
	// sandbox at rest nor keeps one awake.
	ctx = withoutWaking(ctx)
	got, err := j.fetch(ctx, ac, after)
	if err == nil && boot != "" && got.Boot != boot && after > 0 {
		got, err = j.fetch(ctx, ac, 0) // a new agent: its lines from the first
	}
	if err != nil {
		j.svc.log.Debug("read sandbox agent logs", "sandbox", id, "err", err)
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if got.Boot != l.boot {
		l.boot, l.seq = got.Boot, 0
	}
	now := time.Now().UTC()
	for _, g := range got.Logs {
		if g.Seq <= l.seq {
			continue
		}
		e := agentEntry(g, now)
		l.push(e)
		j.lines.publish(id, e)
		l.seq = g.Seq
	}
}

// agentLine is one line of the agent's GET /logs.
type agentLine struct {
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"timestamp"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields"`
}

// Bounds of one agent line as kept: the agent runs inside the sandbox, so
// what it sends is the sandbox's word, and is cut to size.
const (
	maxLogMessage = 1024
	maxLogFields  = 16
	maxFieldKey   = 64
	maxFieldValue = 256
)

// agentEntry is g as kept: its level one of the four (else info), its
// message and fields cut to size, at most maxLogFields fields (by key
// order), "source" set to "agent" whatever it said, and a time after now
// (the sandbox's clock is its own) taken as now.
func agentEntry(g agentLine, now time.Time) LogEntry {
	level := g.Level
	if _, ok := levelRank[level]; !ok {
		level = "info"
	}
	keys := make([]string, 0, len(g.Fields))
	for k := range g.Fields {
		if k != "source" && k != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	f := make(map[string]string, min(len(keys), maxLogFields)+1)
	for _, k := range keys {
		if len(f) == maxLogFields {
			break
		}
		f[truncate(k, maxFieldKey)] = truncate(g.Fields[k], maxFieldValue)
	}
	f["source"] = "agent"
	t := g.Time.UTC()
	if t.After(now) {
		t = now
	}
	return LogEntry{Time: t, Level: level, Message: truncate(g.Message, maxLogMessage), Fields: f}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func (j *journal) fetch(ctx context.Context, ac *AgentConn, after uint64) (*agentLogs, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/logs?after=%d", ac.BaseURL, after), nil)
	if err != nil {
		return nil, err
	}
	resp, err := ac.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent /logs: %s", resp.Status)
	}
	var out agentLogs
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAgentLogsBody)).Decode(&out); err != nil {
		return nil, fmt.Errorf("agent /logs: %w", err)
	}
	return &out, nil
}

var levelRank = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// Selects reports whether q selects e, but for its Limit.
func (q LogQuery) Selects(e LogEntry) bool {
	switch {
	case levelRank[e.Level] < levelRank[q.Level]:
	case q.Search != "" && !strings.Contains(e.Message, q.Search):
	case !q.Cursor.IsZero() && !q.Backward && e.Time.Before(q.Cursor):
	case !q.Cursor.IsZero() && q.Backward && e.Time.After(q.Cursor):
	default:
		return true
	}
	return false
}

// read returns id's lines that q selects, by time.
func (j *journal) read(id string, q LogQuery) []LogEntry {
	j.mu.Lock()
	var all []LogEntry
	if l, ok := j.logs[id]; ok {
		all = slices.Clone(l.lines)
	}
	j.mu.Unlock()
	return selectLines(all, q)
}

// selectLines returns the lines of all that q selects, by time (all is
// the caller's to reorder).
func selectLines(all []LogEntry, q LogQuery) []LogEntry {
	// Agent lines arrive late (read every interval): order by time.
	slices.SortStableFunc(all, func(a, b LogEntry) int { return a.Time.Compare(b.Time) })
	if q.Backward {
		slices.Reverse(all)
	}
	out := []LogEntry{}
	for _, e := range all {
		if q.Selects(e) {
			out = append(out, e)
		}
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out
}

// followLines returns id's lines that q (forward) selects, by time, the newest
// q.Limit of them if it has one, and a channel of every line of id kept
// after them (which the caller filters with q.Selects), until cancel.
func (j *journal) followLines(id string, q LogQuery) (now []LogEntry, next <-chan LogEntry, cancel func()) {
	j.mu.Lock()
	var all []LogEntry
	if l, ok := j.logs[id]; ok {
		all = slices.Clone(l.lines)
	}
	next, cancel = j.lines.subscribe(id)
	j.mu.Unlock()
	limit := q.Limit
	q.Backward, q.Limit = false, 0
	now = selectLines(all, q)
	if limit > 0 && len(now) > limit {
		now = now[len(now)-limit:]
	}
	return now, next, cancel
}
