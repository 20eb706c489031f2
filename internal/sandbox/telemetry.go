package sandbox

import (
	"context"
	"time"

	"github.com/spacesandbox/space/internal/runtime"
)

// Telemetry is what spaced keeps of each sandbox while it lives: its
// metrics over time (CPU, memory and disk, sampled from the host; usage.go)
// and its log (its agent's own lines and its lifecycle as spaced saw it;
// journal.go). Both are kept in memory, bounded, from the sandbox's first
// moment until its record is gone (an ended sandbox's for as long as the
// record is kept), and both start afresh when spaced restarts.
type Telemetry struct {
	svc   *Service
	usage *usage
	logs  *journal
}

// TelemetryConfig configures Telemetry; zero values take the defaults.
type TelemetryConfig struct {
	// Interval is how often each running sandbox is sampled and its
	// agent's new log lines read (5 s, as E2B samples).
	Interval time.Duration
}

// Retention of the series: every sample of the last hour (at most
// maxRecent), then summaries of the rest of the sandbox's life, at most
// maxSummaries of them (one a minute for a day, then coarser: history),
// about 400 KiB a sandbox at most. Of the log, the last logLines
// lines holding at most logBytes (each agent line cut to size, journal.go),
// and one read of the agent's lines is at most maxAgentLogsBody: a sandbox
// cannot make spaced keep more of it than that.
const (
	recentWindow     = time.Hour
	maxRecent        = 3600
	summaryStep      = time.Minute
	maxSummaries     = 1440
	logLines         = 2000
	logBytes         = 1 << 20
	maxAgentLogsBody = 4 << 20
)

// NewTelemetry keeps the metrics and logs of svc's sandboxes; the metrics
// need a runtime that can read a sandbox's usage (runtime.UsageReader),
// else there are none. Call Run.
func NewTelemetry(svc *Service, rt runtime.Runtime, cfg TelemetryConfig) *Telemetry {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	rd, _ := rt.(runtime.UsageReader)
	return &Telemetry{svc: svc, usage: newUsage(svc, rd, cfg.Interval), logs: newJournal(svc, cfg.Interval)}
}

// Run samples and follows the sandboxes until ctx ends.
func (t *Telemetry) Run(ctx context.Context) {
	go t.logs.follow(ctx, t.forget)
	go t.logs.pullLoop(ctx)
	t.usage.run(ctx)
}

// Interval is the sampling interval.
func (t *Telemetry) Interval() time.Duration { return t.usage.interval }

// forget drops what is kept of a sandbox whose record is gone.
func (t *Telemetry) forget(id string) {
	t.usage.forget(id)
	t.logs.forget(id)
}

// Metrics returns sandbox id's samples taken between from and to
// (inclusive; zero times are open ends), oldest first. The sandbox must be
// known (running, paused, or ended and still kept).
func (t *Telemetry) Metrics(ctx context.Context, id string, from, to time.Time) ([]MetricSample, error) {
	if _, err := t.svc.Get(ctx, id); err != nil {
		return nil, err
	}
	return t.usage.between(id, from, to), nil
}

// LatestMetrics returns the newest sample of each of ids that has one.
func (t *Telemetry) LatestMetrics(ids []string) map[string]MetricSample {
	out := map[string]MetricSample{}
	for _, id := range ids {
		if s, ok := t.usage.latest(id); ok {
			out[id] = s
		}
	}
	return out
}

// FollowMetrics returns the newest sample of each running sandbox, and a
// channel that gets every sample of every sandbox as it is taken, with
// the sandbox's tenant (the caller shows each only to those who own it).
// The channel closes at cancel, or when its reader falls feedBuffer samples
// behind: then it follows again, from a fresh now.
func (t *Telemetry) FollowMetrics() (now []SandboxSample, next <-chan SandboxSample, cancel func()) {
	return t.usage.follow()
}

// Logs returns sandbox id's log, oldest first: for a running sandbox its
// agent's newest lines are read first.
func (t *Telemetry) Logs(ctx context.Context, id string, q LogQuery) ([]LogEntry, error) {
	if _, err := t.svc.Get(ctx, id); err != nil {
		return nil, err
	}
	t.logs.pull(ctx, id)
	return t.logs.read(id, q), nil
}

// FollowLogs returns sandbox id's lines that q selects going forward, by
// time (the newest q.Limit of them, if it has a limit), and a channel of
// each line of its log kept from then on, which the caller filters with
// q.Selects: agent lines are read every interval and may be older than
// lines sent before them. The channel closes at cancel, when the
// sandbox's record is gone, or when its reader falls feedBuffer lines
// behind (then it follows again).
func (t *Telemetry) FollowLogs(ctx context.Context, id string, q LogQuery) (now []LogEntry, next <-chan LogEntry, cancel func(), err error) {
	if _, err := t.svc.Get(ctx, id); err != nil {
		return nil, nil, nil, err
	}
	t.logs.pull(ctx, id)
	now, next, cancel = t.logs.followLines(id, q)
	return now, next, cancel, nil
}

// ring keeps the last max values pushed, in order.
type ring[T any] struct {
	max  int
	buf  []T
	head int // when full, the index of the oldest
}

func (r *ring[T]) push(v T) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.head] = v
	r.head = (r.head + 1) % r.max
}

// each calls fn on every value, oldest first, until fn returns false.
func (r *ring[T]) each(fn func(T) bool) {
	for i := range r.buf {
		if !fn(r.buf[(r.head+i)%len(r.buf)]) {
			return
		}
	}
}

// first and last are the oldest and newest values (ok false when empty).
func (r *ring[T]) first() (v T, ok bool) {
	if len(r.buf) == 0 {
		return v, false
	}
	return r.buf[r.head%len(r.buf)], true
}

func (r *ring[T]) last() (v T, ok bool) {
	if len(r.buf) == 0 {
		return v, false
	}
	return r.buf[(r.head+len(r.buf)-1)%len(r.buf)], true
}
