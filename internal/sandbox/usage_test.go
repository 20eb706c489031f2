package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// fakeUsage is a runtime.UsageReader whose figures the test sets.
type fakeUsage map[string]runtime.Usage

func (f fakeUsage) Usage(_ context.Context, id string) (runtime.Usage, error) {
	u, ok := f[id]
	if !ok {
		return runtime.Usage{}, fmt.Errorf("no sandbox %s", id)
	}
	return u, nil
}

// TestUsageTick: the first reading of a sandbox instance is a baseline; each
// later one, an interval on, is a sample whose CPU is the CPU time used
// since, over the time passed and the sandbox's CPUs; a new instance (a
// resume) starts a new baseline; paused and pooled sandboxes are not
// sampled.
func TestUsageTick(t *testing.T) {
	svc := &Service{live: &liveSet{entries: map[string]*entry{}}}
	running := &entry{rec: &store.Sandbox{ID: "busy", State: store.StateRunning, CPU: 2, MemoryMB: 512, DiskMB: 1024}}
	svc.live.entries["busy"] = running
	svc.live.entries["pool"] = &entry{rec: &store.Sandbox{ID: "pool", State: store.StatePooled, CPU: 1}}
	svc.live.entries["build"] = &entry{rec: &store.Sandbox{ID: "build", State: store.StateRunning, CPU: 1}, build: "b1"}
	rd := fakeUsage{
		"busy":  {CPU: time.Second, Memory: 100 << 20, MemoryCache: 3 << 20, Disk: 7 << 20},
		"pool":  {CPU: time.Second},
		"build": {CPU: time.Second},
	}
	u := newUsage(svc, rd, 10*time.Millisecond)
	ctx := context.Background()

	u.tick(ctx, time.Now())
	if got := u.between("busy", time.Time{}, time.Time{}); len(got) != 0 {
		t.Fatalf("a first reading made samples: %+v", got)
	}
	time.Sleep(50 * time.Millisecond)
	readAt := u.series["busy"].readAt
	// One CPU busy until the tick starts. The tick reads the clock itself,
	// after this, so the share it reports is at most 50% and at least what
	// the longest interval it could have seen gives (a preempted test
	// stretches that interval; the bound follows it).
	before := time.Now()
	elapsed := before.Sub(readAt)
	rd["busy"] = runtime.Usage{CPU: time.Second + elapsed, Memory: 200 << 20, MemoryCache: 4 << 20, Disk: 9 << 20}
	u.tick(ctx, before)
	longest := time.Since(readAt)
	got := u.between("busy", time.Time{}, time.Time{})
	if len(got) != 1 {
		t.Fatalf("samples %+v", got)
	}
	m := got[0]
	least := 100*elapsed.Seconds()/longest.Seconds()/2 - 0.01
	if m.CPUCount != 2 || m.CPUUsedPct < least || m.CPUUsedPct > 50.01 {
		t.Errorf("one of two CPUs busy: %.2f%% not in [%.2f, 50] (%+v)", m.CPUUsedPct, least, m)
	}
	if m.MemUsed != 200<<20 || m.MemTotal != 512<<20 || m.MemCache != 4<<20 || m.DiskUsed != 9<<20 || m.DiskTotal != 1024<<20 {
		t.Errorf("sample %+v", m)
	}
	for _, id := range []string{"pool", "build"} {
		if _, ok := u.series[id]; ok {
			t.Errorf("%s was sampled", id)
		}
	}
	if _, ok := u.latest("busy"); !ok {
		t.Error("no latest sample")
	}

	// A resume is a new entry whose cgroup counts from zero.
	svc.live.entries["busy"] = &entry{rec: running.rec}
	rd["busy"] = runtime.Usage{CPU: time.Millisecond, Memory: 50 << 20}
	time.Sleep(20 * time.Millisecond)
	u.tick(ctx, time.Now())
	if got := u.between("busy", time.Time{}, time.Time{}); len(got) != 1 {
		t.Fatalf("a new instance's first reading made a sample: %+v", got)
	}
	// Paused: no samples.
	svc.live.entries["busy"].rec = &store.Sandbox{ID: "busy", State: store.StatePaused, CPU: 2}
	time.Sleep(20 * time.Millisecond)
	u.tick(ctx, time.Now())
	if got := u.between("busy", time.Time{}, time.Time{}); len(got) != 1 {
		t.Fatalf("a paused sandbox was sampled: %+v", got)
	}
}

// TestSeriesRetention: samples stay as taken for the recent window, and
// older ones survive as one-minute summaries (CPU averaged, memory at its
// peak), returned oldest first without overlap; from/to bound them. The
// summaries cover the sandbox's whole life in bounded memory: past a day,
// neighbours are merged and the step doubles.
func TestSeriesRetention(t *testing.T) {
	u := &usage{interval: 5 * time.Second}
	s := u.newSeries()
	if s.recent.max != 720 || s.history.step != time.Minute {
		t.Fatalf("recent %d, summary step %s", s.recent.max, s.history.step)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 2 * 720 // two hours of samples
	for i := 0; i < n; i++ {
		s.add(MetricSample{Time: start.Add(time.Duration(i) * 5 * time.Second), CPUUsedPct: float64(i % 12), MemUsed: uint64(i)})
	}
	u.series = map[string]*series{"x": s}
	all := u.between("x", time.Time{}, time.Time{})
	// The first hour as 60 summaries, the second as 720 samples.
	if len(all) != 60+720 {
		t.Fatalf("%d points", len(all))
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Time.After(all[i-1].Time) {
			t.Fatalf("not in order at %d: %v then %v", i, all[i-1].Time, all[i].Time)
		}
	}
	first := all[0]
	if first.CPUUsedPct != 5.5 || first.MemUsed != 11 || !first.Time.Equal(start.Add(55*time.Second)) {
		t.Errorf("first summary %+v", first)
	}
	if all[60].Time != start.Add(720*5*time.Second) {
		t.Errorf("first kept sample at %v", all[60].Time)
	}
	from, to := start.Add(30*time.Minute), start.Add(90*time.Minute)
	part := u.between("x", from, to)
	if len(part) == 0 || part[0].Time.Before(from) || part[len(part)-1].Time.After(to) {
		t.Errorf("between %v and %v: %d points from %v", from, to, len(part), part[0].Time)
	}

	// Three days on, the first minutes are still there, summed up with
	// their neighbours (the memory peak of the first ones kept), and what
	// is kept stays bounded.
	days := 3 * 24 * 720
	for i := n; i < n+days; i++ {
		s.add(MetricSample{Time: start.Add(time.Duration(i) * 5 * time.Second), CPUUsedPct: 1})
	}
	all = u.between("x", time.Time{}, time.Time{})
	if len(all) > maxSummaries+720 || len(s.history.sums) > maxSummaries {
		t.Errorf("%d points kept, %d summaries", len(all), len(s.history.sums))
	}
	if s.history.step != 4*time.Minute {
		t.Errorf("after three days the step is %s, want 4m", s.history.step)
	}
	first = all[0]
	if first.Time.After(start.Add(4*time.Minute)) || first.MemUsed != 47 {
		t.Errorf("the first summary after three days: %+v", first)
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Time.After(all[i-1].Time) {
			t.Fatalf("not in order at %d: %v then %v", i, all[i-1].Time, all[i].Time)
		}
	}
	// A merged summary's CPU is the mean of all its samples, not of its
	// two halves' means.
	a := accumulator{n: 3, cpu: 30}
	if got := a.merge(accumulator{n: 1, cpu: 50}).summary().CPUUsedPct; got != 20 {
		t.Errorf("merged CPU %v, want 20", got)
	}
}

func TestCPUPct(t *testing.T) {
	for _, tt := range []struct {
		used, elapsed time.Duration
		cpus          int
		want          float64
	}{
		{time.Second, time.Second, 1, 100},
		{time.Second, time.Second, 2, 50},
		{3 * time.Second, time.Second, 2, 100}, // clamped
		{0, time.Second, 1, 0},
		{time.Second, 0, 1, 0},
		{123456789, time.Second, 1, 12.35},
	} {
		if got := cpuPct(tt.used, tt.elapsed, tt.cpus); got != tt.want {
			t.Errorf("cpuPct(%v, %v, %d) = %v, want %v", tt.used, tt.elapsed, tt.cpus, got, tt.want)
		}
	}
}

// TestJournal: lifecycle lines from record changes, agent-style lines, and
// the E2B query (cursor, direction, level, search, limit).
func TestJournalLines(t *testing.T) {
	j := newJournal(&Service{live: &liveSet{entries: map[string]*entry{}}}, time.Second)
	end := time.Now().Add(time.Minute)
	for _, sb := range []*Sandbox{
		{ID: "s", State: StateCreating},
		{ID: "s", State: StateRunning, Template: "base", CPU: 2, ExpiresAt: end},
		{ID: "s", State: StateRunning, Template: "base", CPU: 2, ExpiresAt: end.Add(time.Hour)},
		{ID: "s", State: StatePaused, Reason: "paused by request", Checkpoint: &CheckpointInfo{DiskOnly: true}},
		{ID: "s", State: StateResuming},
		{ID: "s", State: StateRunning, ExpiresAt: end},
		{ID: "s", State: StateLost, Reason: "sandbox stopped unexpectedly"},
	} {
		j.observe(sb)
		time.Sleep(time.Millisecond)
	}
	j.add("s", LogEntry{Time: time.Now().UTC(), Level: "warn", Message: "Process with pid 7 started", Fields: map[string]string{"source": "agent"}})
	all := j.read("s", LogQuery{})
	var msgs []string
	for _, e := range all {
		msgs = append(msgs, e.Message)
	}
	want := "[Sandbox created Sandbox timeout changed Sandbox paused Sandbox resumed Sandbox lost Process with pid 7 started]"
	if fmt.Sprint(msgs) != want {
		t.Fatalf("lines %v\nwant %s", msgs, want)
	}
	if all[2].Fields["kept"] != "disk" || all[2].Fields["reason"] != "paused by request" || all[0].Fields["cpu_count"] != "2" || all[4].Level != "error" {
		t.Errorf("fields %+v", all)
	}
	for _, tt := range []struct {
		q    LogQuery
		want string
	}{
		{LogQuery{Level: "warn"}, "[Sandbox lost Process with pid 7 started]"},
		{LogQuery{Search: "Sandbox re"}, "[Sandbox resumed]"},
		{LogQuery{Backward: true, Limit: 2}, "[Process with pid 7 started Sandbox lost]"},
		{LogQuery{Cursor: all[3].Time}, "[Sandbox resumed Sandbox lost Process with pid 7 started]"},
		{LogQuery{Cursor: all[1].Time, Backward: true}, "[Sandbox timeout changed Sandbox created]"},
	} {
		var got []string
		for _, e := range j.read("s", tt.q) {
			got = append(got, e.Message)
		}
		if fmt.Sprint(got) != tt.want {
			t.Errorf("%+v: %v, want %s", tt.q, got, tt.want)
		}
	}
	if got := j.read("other", LogQuery{}); len(got) != 0 {
		t.Errorf("unknown sandbox: %v", got)
	}
}

// TestAgentEntry: an agent line is the sandbox's word, kept only cut to
// size, with a known level, its source "agent" and no time in the future.
func TestAgentEntry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	many := map[string]string{"source": "spaced"}
	for i := range 40 {
		many[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 1000)
	}
	for _, tt := range []struct {
		name  string
		in    agentLine
		check func(LogEntry) string
	}{
		{"plain", agentLine{Time: now.Add(-time.Second), Level: "warn", Message: "hi", Fields: map[string]string{"pid": "7"}}, func(e LogEntry) string {
			if e.Level != "warn" || e.Message != "hi" || e.Fields["pid"] != "7" || e.Fields["source"] != "agent" || !e.Time.Equal(now.Add(-time.Second)) {
				return fmt.Sprintf("%+v", e)
			}
			return ""
		}},
		{"unknown level", agentLine{Level: "EMERG"}, func(e LogEntry) string {
			if e.Level != "info" {
				return e.Level
			}
			return ""
		}},
		{"future time", agentLine{Time: now.Add(time.Hour)}, func(e LogEntry) string {
			if !e.Time.Equal(now) {
				return e.Time.String()
			}
			return ""
		}},
		{"huge", agentLine{Message: strings.Repeat("é", 100000), Fields: many}, func(e LogEntry) string {
			if len(e.Message) > maxLogMessage || !strings.HasSuffix(e.Message, "...") || !utf8.ValidString(e.Message) {
				return fmt.Sprintf("message of %d bytes", len(e.Message))
			}
			if len(e.Fields) != maxLogFields+1 || e.Fields["source"] != "agent" || len(e.Fields["k00"]) > maxFieldValue {
				return fmt.Sprintf("%d fields", len(e.Fields))
			}
			return ""
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if msg := tt.check(agentEntry(tt.in, now)); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// TestLogBounds: a sandbox's log keeps at most logLines lines and about
// logBytes, the newest.
func TestLogBounds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		message string
		n       int
	}{
		{"many small lines", "x", 3 * logLines},
		{"big lines", strings.Repeat("x", maxLogMessage), 5000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var l sandboxLog
			for i := range tt.n {
				l.push(LogEntry{Level: "info", Message: tt.message, Fields: map[string]string{"i": fmt.Sprint(i)}})
			}
			size := 0
			for _, e := range l.lines {
				size += entrySize(e)
			}
			if len(l.lines) > logLines || size != l.bytes || l.bytes > logBytes {
				t.Fatalf("%d lines, %d bytes (counted %d)", len(l.lines), size, l.bytes)
			}
			if last := l.lines[len(l.lines)-1]; last.Fields["i"] != fmt.Sprint(tt.n-1) {
				t.Errorf("newest line kept is %v", last.Fields)
			}
		})
	}
}

// TestUsageTickFrozen: a frozen sandbox is sampled without reading the
// host (its last sample again, at 0% CPU), and once thawed its next
// reading counts its CPU from the frozen sample on, not over the rest; a
// frozen sandbox with no sample of its instance yet is read as usual.
func TestUsageTickFrozen(t *testing.T) {
	svc := &Service{live: &liveSet{entries: map[string]*entry{}}}
	conns := &connSet{}
	r := &rest{id: "sb"}
	conns.rest.Store(r)
	e := &entry{rec: &store.Sandbox{ID: "sb", State: store.StateRunning, CPU: 1, MemoryMB: 512, DiskMB: 1024}, agent: &AgentConn{conns: conns}}
	svc.live.entries["sb"] = e
	reads := 0
	rd := countingUsage{n: &reads, u: &runtime.Usage{CPU: time.Second, Memory: 100 << 20, Disk: 7 << 20}}
	u := newUsage(svc, rd, 10*time.Millisecond)
	ctx := context.Background()

	frozen := func(v bool) { r.mu.Lock(); r.frozen = v; r.mu.Unlock() }
	step := func() { time.Sleep(20 * time.Millisecond); u.tick(ctx, time.Now()) }

	frozen(true)
	u.tick(ctx, time.Now()) // a baseline: read
	step()                  // no sample of this instance yet: read
	if reads != 2 {
		t.Fatalf("%d reads of a frozen sandbox without a sample yet, want 2", reads)
	}
	step()
	step()
	if reads != 2 {
		t.Errorf("a frozen sandbox with a sample was read from the host (%d reads)", reads)
	}
	got := u.between("sb", time.Time{}, time.Time{})
	if len(got) != 3 {
		t.Fatalf("samples %+v, want 3", got)
	}
	for _, m := range got[1:] {
		if m.CPUUsedPct != 0 || m.MemUsed != 100<<20 || m.DiskUsed != 7<<20 || !m.Time.After(got[0].Time) {
			t.Errorf("frozen sample %+v, want the last one's figures at 0%% CPU and a later time", m)
		}
	}

	frozen(false)
	last := u.series["sb"].readAt
	time.Sleep(20 * time.Millisecond)
	used := time.Since(last) / 2 // half a CPU since the last frozen sample
	*rd.u = runtime.Usage{CPU: time.Second + used, Memory: 100 << 20, Disk: 7 << 20}
	u.tick(ctx, time.Now())
	got = u.between("sb", time.Time{}, time.Time{})
	if m := got[len(got)-1]; reads != 3 || m.CPUUsedPct < 30 || m.CPUUsedPct > 50.01 {
		t.Errorf("after the thaw: %d reads, sample %+v; want a read and about 50%% CPU", reads, m)
	}
}

// countingUsage is one sandbox's usage, counting the reads.
type countingUsage struct {
	n *int
	u *runtime.Usage
}

func (c countingUsage) Usage(context.Context, string) (runtime.Usage, error) {
	*c.n++
	return *c.u, nil
}
