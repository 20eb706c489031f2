package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/cutproxy"
)

// ReconnectConfig configures space bench --reconnects: Streams command
// streams at once, spread over Sandboxes sandboxes, every client going
// through a loopback proxy that cuts its connections at random
// (internal/cutproxy) and resuming with Last-Event-ID.
type ReconnectConfig struct {
	// Addr and APIKey are spaced's; the proxy forwards to Addr.
	Addr, APIKey string
	Streams      int
	Sandboxes    int
	// Duration is how long the streams run all together: every command
	// prints a numbered line each Interval until the bench tells it to
	// stop, Duration after the last one started; then "end N", exit 0.
	Duration time.Duration
	Interval time.Duration
	// CutMeanBytes is the mean of the bytes a connection carries back to
	// its client before the proxy resets it; CutMeanLife the mean of its
	// lifetime (0: that kind of cut is off).
	CutMeanBytes int
	CutMeanLife  time.Duration
	Seed         uint64
	// NoResume reads each stream without resuming: the control, which
	// must lose events at the first cut.
	NoResume bool
	Log      io.Writer
}

// ReconnectFigures are the results. Latencies in ms.
type ReconnectFigures struct {
	Streams      int     `json:"streams"`
	Sandboxes    int     `json:"sandboxes"`
	Resume       bool    `json:"resume"`
	DurationS    float64 `json:"duration_s"`
	IntervalMs   float64 `json:"interval_ms"`
	CutMeanBytes int     `json:"cut_mean_bytes"`
	CutMeanLifeS float64 `json:"cut_mean_life_s"`
	// StartS is how long starting every command took (32 at a time): to
	// the last response to its POST.
	StartS float64 `json:"start_s"`
	// Events the clients were handed (after the client's own dedupe of
	// replays); Lines the numbered lines among them.
	Events int64 `json:"events"`
	Lines  int64 `json:"lines"`
	// Conns and Cuts are the proxy's: connections forwarded, and of them
	// those it reset.
	Conns int64 `json:"conns"`
	Cuts  int64 `json:"cuts"`
	// Reconnects are resumed streams (GET .../events with Last-Event-ID
	// answered 200); ResumeAttempts every try, failed ones too.
	Reconnects     int64 `json:"reconnects"`
	ResumeAttempts int64 `json:"resume_attempts"`
	// Restarts are starts sent again under their idempotency key (an
	// answer cut before its start event, or a 503); Replayed the answers
	// that carried the command an earlier try had started (the others
	// found none, and started it).
	Restarts int64 `json:"restarts"`
	Replayed int64 `json:"replayed"`
	// ReconnectsPerS is the reconnects over the steady window (every
	// stream started, none ended) per second; ReconnectsPerSAll over the
	// whole run.
	ReconnectsPerS    float64 `json:"reconnects_per_s"`
	SteadyS           float64 `json:"steady_s"`
	ReconnectsPerSAll float64 `json:"reconnects_per_s_all"`
	// Lost are numbered lines a stream never showed, Repeated those it
	// showed more than once, OutOfOrder those that came after a higher
	// one; LostEvents the event ids skipped, Gaps the agent's gap events,
	// MissingEnd the streams without their "end N" line and exit 0 end
	// event, Failed the streams that ended in an error (FirstError).
	Lost       int64  `json:"lost"`
	Repeated   int64  `json:"repeated"`
	OutOfOrder int64  `json:"out_of_order"`
	LostEvents int64  `json:"lost_events"`
	Gaps       int64  `json:"gaps"`
	MissingEnd int    `json:"missing_end"`
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	// Reconnect latency: from the client seeing the cut to the first
	// event after it. InFlight are the cuts that fell inside an event (or
	// before the first), so that event was waiting to be replayed: the
	// reconnect's own cost. All counts the others too, which wait for the
	// command's next line (up to Interval).
	ReconnectP50      float64 `json:"reconnect_p50"`
	ReconnectP99      float64 `json:"reconnect_p99"`
	ReconnectInFlight int     `json:"reconnect_in_flight"`
	ReconnectAllP50   float64 `json:"reconnect_all_p50"`
	ReconnectAllP99   float64 `json:"reconnect_all_p99"`
	// spaced over the run (its /metrics): CPU in ms per second of wall
	// time, and the highest RSS, open descriptors and goroutines seen.
	SpacedCPUMsPerS float64 `json:"spaced_cpu_ms_per_s"`
	// SandboxCPUMsPerS is the sandboxes' (their cgroups: sentry, gofer,
	// the commands, the agent), -1 when it cannot be read (not on
	// spaced's host, not root); BenchCPUMsPerS this process's (the
	// clients and the proxy). Both over the same run.
	SandboxCPUMsPerS    float64 `json:"sandbox_cpu_ms_per_s"`
	BenchCPUMsPerS      float64 `json:"bench_cpu_ms_per_s"`
	SpacedRSSMiBMax     float64 `json:"spaced_rss_mib_max"`
	SpacedFDsMax        float64 `json:"spaced_fds_max"`
	SpacedGoroutinesMax float64 `json:"spaced_goroutines_max"`
	// BenchFDsMax is this process's own (clients and proxy).
	BenchFDsMax int     `json:"bench_fds_max"`
	LoadStart   float64 `json:"load_start"`
	LoadEnd     float64 `json:"load_end"`
}

// Reconnects runs the reconnect benchmark.
func Reconnects(ctx context.Context, c *client.Client, cfg ReconnectConfig) (*ReconnectFigures, error) {
	if cfg.Streams <= 0 || cfg.Sandboxes <= 0 || cfg.Duration <= 0 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("reconnects: streams, sandboxes, duration and interval must be positive")
	}
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	f := &ReconnectFigures{
		Streams: cfg.Streams, Sandboxes: cfg.Sandboxes, Resume: !cfg.NoResume,
		DurationS: cfg.Duration.Seconds(), IntervalMs: float64(cfg.Interval.Milliseconds()),
		CutMeanBytes: cfg.CutMeanBytes, CutMeanLifeS: cfg.CutMeanLife.Seconds(), LoadStart: loadAverage(),
	}
	proxy, err := cutproxy.Listen(cutproxy.Options{Target: cfg.Addr, MeanBytes: cfg.CutMeanBytes, MeanLife: cfg.CutMeanLife, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	defer proxy.Close()

	logf("reconnects: creating %d sandboxes", cfg.Sandboxes)
	ids, err := streamSandboxes(ctx, c, cfg)
	defer killAll(context.WithoutCancel(ctx), c, ids)
	if err != nil {
		return nil, err
	}

	// The daemon's figures, sampled every second until the streams end.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		f.watch(watchCtx, c)
	}()
	cpu0, err := spacedCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	sbCPU0, sbErr := cgroupsCPU(ids)
	own0 := ownCPU()
	wall0 := time.Now()

	// Bounded: the commands end Duration after the last start; starting
	// 1,000 took 284 s on a saturated 2-core host. A stream still open
	// after this is stuck.
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+15*time.Minute)
	defer cancel()
	transport := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	defer transport.CloseIdleConnections()
	run := &reconnectRun{cfg: cfg, proxy: "http://" + proxy.Addr(), transport: transport,
		runID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36), logf: logf, direct: c}
	logf("reconnects: %d streams through the cutting proxy (mean %d bytes, %s)", cfg.Streams, cfg.CutMeanBytes, cfg.CutMeanLife)
	results := make([]*streamState, cfg.Streams)
	var wg sync.WaitGroup
	starts := make(chan struct{}, 32)
	var started atomic.Int64
	var lastStart atomic.Int64
	for i := range cfg.Streams {
		st := run.newStream(i, ids[i%len(ids)])
		results[i] = st
		wg.Add(1)
		starts <- struct{}{}
		go func() {
			defer wg.Done()
			st.run(ctx, func() {
				<-starts
				started.Add(1)
				lastStart.Store(time.Now().UnixNano())
			})
		}()
	}
	for range cap(starts) { // the last POSTs answered
		starts <- struct{}{}
	}
	allStarted := time.Unix(0, lastStart.Load())
	logf("reconnects: %d started in %.1f s; running %s", started.Load(), allStarted.Sub(wall0).Seconds(), cfg.Duration)
	progress := time.NewTicker(10 * time.Second)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stop := time.After(cfg.Duration)
	var stopAt time.Time
wait:
	for {
		select {
		case <-done:
			break wait
		case <-stop:
			stopAt = time.Now()
			logf("reconnects: stopping the commands")
			if err := run.stopCommands(ctx, ids); err != nil {
				logf("reconnects: %v", err)
			}
		case <-progress.C:
			s := proxy.Stats()
			logf("reconnects: %d cuts, %d reconnects so far (load %.1f)", s.Cuts, run.reconnects.Load(), loadAverage())
		}
	}
	progress.Stop()
	if stopAt.IsZero() {
		stopAt = time.Now()
	}
	wall := time.Since(wall0)
	for _, st := range results {
		st.audit(ctx, c)
	}
	cpu1, err := spacedCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	stopWatch()
	<-watched
	perS := func(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond) / wall.Seconds()) }
	f.SpacedCPUMsPerS = perS(cpu1 - cpu0)
	f.BenchCPUMsPerS = perS(ownCPU() - own0)
	f.SandboxCPUMsPerS = -1
	if sbCPU1, err := cgroupsCPU(ids); sbErr == nil && err == nil {
		f.SandboxCPUMsPerS = perS(sbCPU1 - sbCPU0)
	}

	ps := proxy.Stats()
	f.Conns, f.Cuts = ps.Conns, ps.Cuts
	f.Reconnects, f.ResumeAttempts = run.reconnects.Load(), run.attempts.Load()
	f.ReconnectsPerSAll = round2(float64(f.Reconnects) / wall.Seconds())
	f.StartS = round2(allStarted.Sub(wall0).Seconds())
	f.tally(results, allStarted, stopAt)
	f.LoadEnd = loadAverage()
	return f, nil
}

// streamSandboxes creates the sandboxes the commands run in, with room for
// their share of the commands (a bash each).
func streamSandboxes(ctx context.Context, c *client.Client, cfg ReconnectConfig) ([]string, error) {
	per := (cfg.Streams + cfg.Sandboxes - 1) / cfg.Sandboxes
	req := client.CreateSandboxRequest{
		TimeoutSeconds:    int(cfg.Duration.Seconds()) + 600,
		MemoryMB:          max(512, 256+8*per),
		MaxProcesses:      max(1024, 4*per),
		IdleFreezeSeconds: -1,
	}
	var ids []string
	for range cfg.Sandboxes {
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return ids, fmt.Errorf("create sandbox: %w", err)
		}
		ids = append(ids, sb.ID)
	}
	return ids, nil
}

// watch samples spaced's RSS, descriptors and goroutines, and this
// process's descriptors, every second until ctx ends.
func (f *ReconnectFigures) watch(ctx context.Context, c *client.Client) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if s, err := readDaemon(ctx, c); err == nil {
			f.SpacedRSSMiBMax = max(f.SpacedRSSMiBMax, math.Round(s.rss/(1<<20)*10)/10)
			f.SpacedFDsMax = max(f.SpacedFDsMax, s.fds)
			f.SpacedGoroutinesMax = max(f.SpacedGoroutinesMax, s.goroutines)
		}
		if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
			f.BenchFDsMax = max(f.BenchFDsMax, len(fds))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ownCPU is this process's CPU time so far.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stopCommands tells every command to print its end and exit: the file
// its loop looks for. A sandbox whose agent does not answer (a saturated
// host: dials into it time out) is tried again, every second, until ctx
// ends: commands never told would run until then.
func (r *reconnectRun) stopCommands(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		for {
			_, err := r.direct.Upload(ctx, id, r.stopFile(), strings.NewReader("stop\n"))
			if err == nil {
				break
			}
			r.logf("reconnects: stop the commands of %s: %v (trying again)", id, err)
			select {
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("stop the commands of %s: %w", id, err))
			case <-time.After(time.Second):
				continue
			}
			break
		}
	}
	return errors.Join(errs...)
}

// tally checks every stream and sums the figures.
func (f *ReconnectFigures) tally(streams []*streamState, allStarted, deadline time.Time) {
	var inFlight, all Sample
	steady := 0
	for _, st := range streams {
		f.Events += st.events
		f.LostEvents += st.lostEvents
		f.Gaps += st.gaps
		f.Restarts += st.restarts
		f.Replayed += st.replayed
		inFlight = append(inFlight, st.inFlight...)
		all = append(all, st.inFlight...)
		all = append(all, st.idle...)
		for _, at := range st.resumedAt {
			if at.After(allStarted) && at.Before(deadline) {
				steady++
			}
		}
		lines, lost, repeated, disorder, ended := checkLines(st.out.Bytes(), st.truthEnd)
		f.Lines += int64(lines)
		f.Lost += int64(lost)
		f.Repeated += int64(repeated)
		f.OutOfOrder += int64(disorder)
		if !ended || st.exit != 0 {
			f.MissingEnd++
		}
		if st.err != nil {
			f.Failed++
			if f.FirstError == "" {
				f.FirstError = st.err.Error()
			}
		}
	}
	f.ReconnectP50, f.ReconnectP99, f.ReconnectInFlight = inFlight.Percentile(50), inFlight.Percentile(99), len(inFlight)
	f.ReconnectAllP50, f.ReconnectAllP99 = all.Percentile(50), all.Percentile(99)
	if window := deadline.Sub(allStarted); window > 0 {
		f.SteadyS = round2(window.Seconds())
		f.ReconnectsPerS = round2(float64(steady) / window.Seconds())
	}
}

// checkLines checks a stream's output: "1\n2\n...N\nend N\n". It counts
// the numbered lines seen (distinct), those missing, those seen again and
// those that came after a higher one, and whether "end N" closed it with
// no higher number after it (what is missing below it counts as lost).
// truthEnd, when not -1, is the N the command really printed (read back
// without the proxy), for a stream that never showed its end.
func checkLines(out []byte, truthEnd int) (lines, lost, repeated, disorder int, ended bool) {
	seen := map[int]bool{}
	high, endN := 0, -1
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "end "); ok {
			if n, err := strconv.Atoi(rest); err == nil && endN < 0 {
				endN = n
				continue
			}
		}
		n, err := strconv.Atoi(line)
		if err != nil || n <= 0 {
			continue
		}
		if seen[n] {
			repeated++
			continue
		}
		seen[n] = true
		if n < high {
			disorder++
		}
		high = max(high, n)
	}
	want := max(high, endN, truthEnd)
	return len(seen), want - len(seen), repeated, disorder, endN >= 0 && endN == want
}

// reconnectRun is what the streams share.
type reconnectRun struct {
	cfg       ReconnectConfig
	proxy     string
	transport *http.Transport
	runID     string

	reconnects, attempts atomic.Int64
	logf                 func(string, ...any)
	// direct is spaced without the proxy, for the stop file and audits.
	direct *client.Client
}

// streamState is one client: its own client.Client over the shared
// transport, timing its resumes, and what it saw.
type streamState struct {
	shared  *reconnectRun
	c       *client.Client
	sandbox string
	tag     string
	ro      client.ResumeOptions

	// tail is the last two bytes the current response body gave: a cut
	// that leaves it other than "\n\n" fell inside an event.
	tail   [2]byte
	ntail  int
	cutAt  time.Time // the client saw a cut; zero once an event followed
	cutMid bool

	out        bytes.Buffer
	lastID     uint64
	events     int64
	lostEvents int64
	gaps       int64
	posts      int64 // starts sent (the first, then restarts)
	restarts   int64
	replayed   int64
	exit       int
	pid        int
	truthEnd   int // -1 unless audit read it
	err        error
	inFlight   Sample
	idle       Sample
	resumedAt  []time.Time
}

func (r *reconnectRun) newStream(i int, sandbox string) *streamState {
	st := &streamState{shared: r, sandbox: sandbox, tag: fmt.Sprintf("rc-%s-%d", r.runID, i), exit: -1, truthEnd: -1}
	st.c = client.New(r.proxy, r.cfg.APIKey, client.WithUserAgent("space-bench-reconnects"),
		client.WithHTTPClient(&http.Client{Transport: streamTransport{st: st, next: r.transport}}))
	if !r.cfg.NoResume {
		st.ro = client.ResumeOptions{Retries: 40, Backoff: 20 * time.Millisecond, OnResume: st.onResume}
	}
	return st
}

// script prints a numbered line every interval until the stop file
// exists, then "end N". Only builtins: the wait is a read with a timeout
// on a pipe nobody writes to, so a line costs no process.
func (r *reconnectRun) script() string {
	return fmt.Sprintf(`exec 3<> <(:); i=0; while [ ! -e %s ]; do i=$((i+1)); echo $i; read -t %.3f -u 3; done; echo "end $i"`,
		r.stopFile(), r.cfg.Interval.Seconds())
}

func (r *reconnectRun) stopFile() string { return "/tmp/reconnects-stop-" + r.runID }

func (st *streamState) onResume(attempt int, _ error) {
	st.shared.attempts.Add(1)
	if attempt == 1 {
		st.cutAt = time.Now()
		st.cutMid = st.ntail < 2 || st.tail != [2]byte{'\n', '\n'}
	}
}

// run follows the stream to its end; started is called once the command
// was asked for. A cut before the start event is the client's to handle:
// it sends the start again under the same idempotency key.
func (st *streamState) run(ctx context.Context, started func()) {
	req := client.CommandRequest{Argv: []string{"bash", "-c", st.shared.script()}, Tag: st.tag}
	s, err := st.c.RunCommandResumable(ctx, st.sandbox, req, st.ro)
	started()
	if err == nil {
		err = st.follow(s)
		s.Close()
	}
	st.err = err
}

// follow reads s to its end event, checking ids as they come.
func (st *streamState) follow(s *client.CommandStream) error {
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !st.cutAt.IsZero() {
			d := time.Since(st.cutAt)
			if st.cutMid {
				st.inFlight = append(st.inFlight, d)
			} else {
				st.idle = append(st.idle, d)
			}
			st.resumedAt = append(st.resumedAt, time.Now())
			st.cutAt = time.Time{}
		}
		st.events++
		if ev.PID != 0 {
			st.pid = ev.PID
		}
		if ev.ID != 0 {
			if ev.ID > st.lastID+1 {
				st.lostEvents += int64(ev.ID - st.lastID - 1)
			}
			st.lastID = ev.ID
		}
		switch ev.Type {
		case client.EventStdout:
			st.out.Write(ev.Data)
		case client.EventGap:
			st.gaps++
		case client.EventEnd:
			st.exit = ev.Exit.Code()
		}
	}
}

// audit reads, for a stream that did not end well, the whole output of
// its command from spaced directly (c, not through the proxy), once it
// has ended, to know how many lines it missed.
func (st *streamState) audit(ctx context.Context, c *client.Client) {
	if st.exit == 0 && bytes.Contains(st.out.Bytes(), []byte("end ")) {
		return
	}
	pid := st.pid
	if pid == 0 {
		cmds, err := c.ListCommands(ctx, st.sandbox)
		if err != nil {
			return
		}
		i := slices.IndexFunc(cmds, func(c client.Command) bool { return c.Tag == st.tag })
		if i < 0 {
			return
		}
		pid = cmds[i].PID
	}
	s, err := c.CommandEvents(ctx, st.sandbox, pid, 0)
	if err != nil {
		return
	}
	defer s.Close()
	var out bytes.Buffer
	for {
		ev, err := s.Next()
		if err != nil {
			break
		}
		if ev.Type == client.EventStdout {
			out.Write(ev.Data)
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "end "); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				st.truthEnd = n
			}
		}
	}
}

// streamTransport counts a stream's resumes and keeps the tail of the
// body being read.
type streamTransport struct {
	st   *streamState
	next http.RoundTripper
}

func (t streamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if r.Method == http.MethodPost {
		if t.st.posts++; t.st.posts > 1 {
			t.st.restarts++
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			t.st.replayed++
		}
	}
	if r.Header.Get("Accept") == "text/event-stream" && resp.StatusCode == http.StatusOK {
		if r.Header.Get("Last-Event-ID") != "" {
			t.st.shared.reconnects.Add(1)
		}

		t.st.ntail = 0
		resp.Body = tailBody{ReadCloser: resp.Body, st: t.st}
	}
	return resp, nil
}

type tailBody struct {
	io.ReadCloser
	st *streamState
}

func (b tailBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case n >= 2:
		b.st.tail, b.st.ntail = [2]byte{p[n-2], p[n-1]}, 2
	case n == 1:
		b.st.tail, b.st.ntail = [2]byte{b.st.tail[1], p[0]}, min(b.st.ntail+1, 2)
	}
	return n, err
}
