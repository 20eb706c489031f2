package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/client"
)

// SoakConfig is one soak run: Cycles create -> exec -> write -> read -> kill
// cycles, Concurrency at a time.
type SoakConfig struct {
	Cycles      int
	Concurrency int
	// Window is how many cycles make "the first" and "the last" of the run
	// whose daemon figures are compared; 0 means min(100, Cycles/4).
	Window int
	// Runsc and RootFS, when set, add the anchor: raw runsc create, start
	// and delete cycles at the same concurrency (root only).
	Runsc, RootFS string
	Log           io.Writer
}

// Flatness tolerances: the last window's median may exceed the first's by
// this much and still count as flat. RSS moves with the Go heap's pacing and
// with how many sandboxes happen to be in flight, so it gets a relative and
// an absolute slack; file descriptors are per live sandbox and connection,
// so they get a slack per concurrent cycle.
const (
	rssTolerancePct  = 20
	rssToleranceMiB  = 16
	fdSlackPerWorker = 4
)

// StepFigures are one step's latencies in milliseconds.
type StepFigures struct {
	P50    float64 `json:"p50"`
	P95    float64 `json:"p95"`
	Errors int     `json:"errors"`
}

// DaemonFigures are medians of spaced's own /metrics over a window.
type DaemonFigures struct {
	Samples    int     `json:"samples"`
	RSSMiB     float64 `json:"rss_mib"`
	OpenFDs    float64 `json:"open_fds"`
	Goroutines float64 `json:"goroutines"`
}

// SoakResult is what a soak run reports.
type SoakResult struct {
	Cycles      int     `json:"cycles"`
	Concurrency int     `json:"concurrency"`
	Window      int     `json:"window"`
	Seconds     float64 `json:"seconds"`
	// CyclesPerSecond is Cycles over Seconds; RawCyclesPerSecond the
	// anchor's (raw runsc create+start+delete at the same concurrency,
	// for 10 s after the run), and the ratio of the two; RawRun... the
	// stricter anchor's (runsc run --detach + delete, 10 s more).
	CyclesPerSecond       float64                `json:"cycles_per_second"`
	RawCyclesPerSecond    float64                `json:"raw_cycles_per_second,omitempty"`
	ChurnRatio            float64                `json:"churn_ratio,omitempty"`
	RawRunCyclesPerSecond float64                `json:"raw_run_cycles_per_second,omitempty"`
	ChurnRunRatio         float64                `json:"churn_run_ratio,omitempty"`
	Errors                int                    `json:"errors"`
	FirstErrors           []string               `json:"first_errors,omitempty"`
	Steps                 map[string]StepFigures `json:"steps"`
	// Before and After are at rest: before the first cycle and after the
	// last kill. First and Last are under load, over the first and the last
	// Window cycles.
	Before  DaemonFigures `json:"before"`
	First   DaemonFigures `json:"first"`
	Last    DaemonFigures `json:"last"`
	After   DaemonFigures `json:"after"`
	RSSFlat bool          `json:"rss_flat"`
	FDsFlat bool          `json:"fds_flat"`
	// Tolerance says what flat means, for whoever reads the JSON.
	Tolerance string `json:"tolerance"`
}

// soakSteps are the steps of a cycle, in order.
var soakSteps = []string{"create", "exec", "write", "read", "kill"}

// daemonSample is one reading of spaced's /metrics, taken when done cycles
// had completed.
type daemonSample struct {
	done                 int
	rss, fds, goroutines float64
}

// Soak runs the soak against the daemon behind c. Cycle errors are counted
// and reported, not returned: a soak's point is to say how many failed.
func Soak(ctx context.Context, c *client.Client, cfg SoakConfig) (*SoakResult, error) {
	if cfg.Cycles < 1 || cfg.Concurrency < 1 {
		return nil, fmt.Errorf("soak: cycles and concurrency must be positive")
	}
	if cfg.Window <= 0 {
		cfg.Window = min(100, max(1, cfg.Cycles/4))
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "soak: "+format+"\n", args...) }

	var (
		next, done atomic.Int64
		mu         sync.Mutex
		lat        = map[string]Sample{}
		stepErrs   = map[string]int{}
		firstErrs  []string
		samples    []daemonSample
	)
	record := func(step string, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			stepErrs[step]++
			if len(firstErrs) < 10 {
				firstErrs = append(firstErrs, fmt.Sprintf("%s: %v", step, err))
			}
			return
		}
		lat[step] = append(lat[step], d)
	}
	sample := func() {
		n := int(done.Load())
		s, err := readDaemon(ctx, c)
		if err != nil {
			record("metrics", 0, err)
			return
		}
		s.done = n
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	before, err := readDaemon(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("soak: the daemon's /metrics has no process figures: %w", err)
	}

	// A sampler reads /metrics every tenth cycle, so both windows hold
	// samples whatever the run's speed.
	tick := make(chan struct{}, 1)
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for range tick {
			sample()
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && int(next.Add(1)) <= cfg.Cycles {
				soakCycle(ctx, c, record)
				if n := done.Add(1); n%10 == 0 {
					select {
					case tick <- struct{}{}:
					default:
					}
					if n%100 == 0 {
						logf("%d/%d cycles", n, cfg.Cycles)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(tick)
	<-samplerDone
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	after, err := readDaemon(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("soak: after the run: %w", err)
	}

	r := &SoakResult{
		Cycles: cfg.Cycles, Concurrency: cfg.Concurrency, Window: cfg.Window,
		Seconds: math.Round(elapsed.Seconds()*10) / 10, Steps: map[string]StepFigures{},
		FirstErrors: firstErrs,
		Tolerance: fmt.Sprintf("last window's median RSS <= first's +%d%% or +%d MiB (the larger); open fds <= first's + %d per concurrent cycle",
			rssTolerancePct, rssToleranceMiB, fdSlackPerWorker),
	}
	for _, step := range append(slices.Clone(soakSteps), "metrics") {
		r.Errors += stepErrs[step]
		if step == "metrics" && stepErrs[step] == 0 {
			continue
		}
		r.Steps[step] = StepFigures{P50: lat[step].Percentile(50), P95: lat[step].Percentile(95), Errors: stepErrs[step]}
	}
	r.Before = windowFigures([]daemonSample{before}, func(daemonSample) bool { return true })
	r.After = windowFigures([]daemonSample{after}, func(daemonSample) bool { return true })
	r.First = windowFigures(samples, func(s daemonSample) bool { return s.done <= cfg.Window })
	r.Last = windowFigures(samples, func(s daemonSample) bool { return s.done > cfg.Cycles-cfg.Window })
	rssSlack := max(r.First.RSSMiB*rssTolerancePct/100, rssToleranceMiB)
	r.CyclesPerSecond = round2(float64(cfg.Cycles) / elapsed.Seconds())
	if cfg.Runsc != "" {
		logf("raw runsc create+start+delete cycles, then run+delete cycles, %d at a time, for 10 s each", cfg.Concurrency)
		raw, err := newRawRunsc(ctx, cfg.Runsc, cfg.RootFS)
		if err != nil {
			return nil, fmt.Errorf("soak: raw runsc: %w", err)
		}
		defer raw.close()
		n, d, err := raw.churn(ctx, cfg.Concurrency, 10*time.Second, createStart)
		if err != nil {
			return nil, fmt.Errorf("soak: raw runsc: %w", err)
		}
		n1, d1, err := raw.churn(ctx, cfg.Concurrency, 10*time.Second, runDetach)
		if err != nil {
			return nil, fmt.Errorf("soak: raw runsc: %w", err)
		}
		r.RawCyclesPerSecond = round2(float64(n) / d.Seconds())
		r.ChurnRatio = round2(r.CyclesPerSecond / r.RawCyclesPerSecond)
		r.RawRunCyclesPerSecond = round2(float64(n1) / d1.Seconds())
		r.ChurnRunRatio = round2(r.CyclesPerSecond / r.RawRunCyclesPerSecond)
	}
	r.RSSFlat = r.Last.RSSMiB <= r.First.RSSMiB+rssSlack
	r.FDsFlat = r.Last.OpenFDs <= r.First.OpenFDs+float64(fdSlackPerWorker*cfg.Concurrency)
	return r, nil
}

// soakCycle is one create -> exec -> write -> read -> kill; a step that
// fails ends the cycle, but a created sandbox is always killed.
func soakCycle(ctx context.Context, c *client.Client, record func(string, time.Duration, error)) {
	timed := func(step string, f func() error) bool {
		start := time.Now()
		err := f()
		record(step, time.Since(start), err)
		return err == nil
	}
	var sb *client.Sandbox
	if !timed("create", func() (err error) {
		sb, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 300})
		return err
	}) {
		return
	}
	defer timed("kill", func() error { return c.KillSandbox(context.WithoutCancel(ctx), sb.ID) })

	if !timed("exec", func() error {
		out, err := runOutput(ctx, c, sb.ID, "echo soak-"+sb.ID)
		if err == nil && out != "soak-"+sb.ID+"\n" {
			err = fmt.Errorf("echo printed %q", out)
		}
		return err
	}) {
		return
	}
	payload := make([]byte, 4096)
	rand.Read(payload)
	const path = "/home/user/soak.bin"
	if !timed("write", func() error {
		_, err := c.Upload(ctx, sb.ID, path, bytes.NewReader(payload))
		return err
	}) {
		return
	}
	timed("read", func() error {
		rc, err := c.Download(ctx, sb.ID, path)
		if err != nil {
			return err
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if !bytes.Equal(got, payload) {
			return fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(payload))
		}
		return nil
	})
}

// runOutput runs cmd, waits for its end event and returns its stdout.
func runOutput(ctx context.Context, c *client.Client, id, cmd string) (string, error) {
	st, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: cmd})
	if err != nil {
		return "", err
	}
	defer st.Close()
	var out strings.Builder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%q: stream ended without an end event", cmd)
		}
		if err != nil {
			return "", err
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventEnd:
			if code := ev.Exit.Code(); code != 0 {
				return "", fmt.Errorf("%q exited %d", cmd, code)
			}
			return out.String(), nil
		}
	}
}

// readDaemon reads spaced's process figures from its /metrics (client_golang's
// process and Go collectors).
func readDaemon(ctx context.Context, c *client.Client) (daemonSample, error) {
	var s daemonSample
	text, err := c.Metrics(ctx)
	if err != nil {
		return s, err
	}
	found := 0
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "process_resident_memory_bytes":
			dst = &s.rss
		case "process_open_fds":
			dst = &s.fds
		case "go_goroutines":
			dst = &s.goroutines
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return s, fmt.Errorf("metric %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if found < 3 {
		return s, fmt.Errorf("process_resident_memory_bytes, process_open_fds or go_goroutines missing")
	}
	return s, nil
}

// windowFigures are the medians of the samples in a window.
func windowFigures(samples []daemonSample, in func(daemonSample) bool) DaemonFigures {
	var rss, fds, gr []float64
	for _, s := range samples {
		if in(s) {
			rss, fds, gr = append(rss, s.rss), append(fds, s.fds), append(gr, s.goroutines)
		}
	}
	return DaemonFigures{
		Samples: len(rss), RSSMiB: math.Round(median(rss)/(1<<20)*10) / 10,
		OpenFDs: median(fds), Goroutines: median(gr),
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
