package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/client"
)

// Config of one benchmark run.
type Config struct {
	// N is the number of sequential creates (and of time-to-interactive and
	// exec runs).
	N int
	// Burst is how many creates are fired at once.
	Burst int
	// Cold is how many creates with the pool skipped, and raw runsc runs.
	Cold int
	// Idle is how many idle sandboxes the density figure holds;
	// DensityRuns how many creates and execs it times with the box empty
	// and with them held.
	Idle, DensityRuns int
	// ChurnCycles create -> exec -> write -> read -> kill cycles run
	// ChurnConcurrency at a time (0 cycles: no churn figure).
	ChurnCycles, ChurnConcurrency int
	// Runsc and RootFS, when set, enable the raw runsc comparison (root only).
	Runsc  string
	RootFS string
	// Log receives progress lines.
	Log io.Writer
}

// Quick is the configuration CI runs: small counts, same code paths.
func Quick() Config {
	return Config{N: 10, Burst: 10, Cold: 3, Idle: 5, DensityRuns: 5, ChurnCycles: 16, ChurnConcurrency: 8}
}

// Full is the configuration docs/benchmarks.md reports.
func Full() Config {
	return Config{N: 200, Burst: 100, Cold: 30, Idle: 1000, DensityRuns: 50, ChurnCycles: 240, ChurnConcurrency: 8}
}

// Result holds the figures, milliseconds unless named otherwise. Each
// figure of issue 17's table sits beside its anchor, measured in the same
// run, and the ratio of the two.
type Result struct {
	CreateP50 float64 `json:"create_p50"`
	CreateP90 float64 `json:"create_p90"`
	CreateP99 float64 `json:"create_p99"`
	TTIP50    float64 `json:"tti_p50"`
	TTIP90    float64 `json:"tti_p90"`
	ExecP50   float64 `json:"exec_p50"`
	ExecP90   float64 `json:"exec_p90"`
	ExecP95   float64 `json:"exec_p95"`
	// The exec anchors: the same command (sh -c true) spawned and waited
	// for inside the sandbox, timed there (gVisor's own floor for it, with
	// no agent, stream or HTTP); and `runsc exec` of it in a raw container
	// (what a caller of runsc itself pays). ExecRatio is ExecP50 over the
	// first.
	ExecInSandboxP50 float64 `json:"exec_in_sandbox_p50"`
	RawRunscExecP50  float64 `json:"raw_runsc_exec_p50,omitempty"`
	ExecRatio        float64 `json:"exec_ratio"`
	// ExecStaticSpawnP50 is a tiny static program (one exit system call,
	// no libc) spawned and waited for inside the sandbox: the floor under
	// starting any process there. ExecStaticAPIP50 is the same program run
	// through the API (argv, no shell), so the two apart are what the API,
	// spaced and the agent add; ExecStaticRatio is ExecP50 over the floor.
	ExecStaticSpawnP50 float64 `json:"exec_static_spawn_p50"`
	ExecStaticAPIP50   float64 `json:"exec_static_api_p50"`
	ExecStaticRatio    float64 `json:"exec_static_ratio"`
	// TTIAnchor is CreateP50 + ExecP50: what a claim and a command cost
	// apart; TTIRatio is TTIP50 over it.
	TTIAnchor float64 `json:"tti_anchor"`
	TTIRatio  float64 `json:"tti_ratio"`
	// BurstP50 and BurstP95 are a burst against the pool as the daemon is
	// configured (the default configuration, in the documented run),
	// BurstPoolReady how many were ready when it started (-1 when the
	// daemon reports no pool). The anchor is the same burst against a pool
	// raised (through the admin API) until it holds the whole burst, and
	// BurstRatio the first p50 over the anchor's.
	BurstP50           float64 `json:"burst_p50"`
	BurstP95           float64 `json:"burst_p95"`
	BurstPoolReady     int     `json:"burst_pool_ready"`
	BurstFullPoolP50   float64 `json:"burst_full_pool_p50,omitempty"`
	BurstFullPoolP95   float64 `json:"burst_full_pool_p95,omitempty"`
	BurstFullPoolReady int     `json:"burst_full_pool_ready,omitempty"`
	BurstRatio         float64 `json:"burst_ratio,omitempty"`
	ColdCreateP50      float64 `json:"cold_create_p50"`
	RawRunscP50        float64 `json:"raw_runsc_p50"`
	ColdOverheadRatio  float64 `json:"cold_overhead_ratio"`
	// The stricter anchor: the same raw sandbox made by one runsc run
	// --detach (as spaced makes its own), and the cold create over it.
	RawRunscRunP50   float64 `json:"raw_runsc_run_p50,omitempty"`
	ColdOverRunRatio float64 `json:"cold_over_run_ratio,omitempty"`
	// Churn: create, exec, write, read, kill cycles at ChurnConcurrency,
	// against raw runsc create+start+delete cycles at the same concurrency.
	ChurnConcurrency     int     `json:"churn_concurrency,omitempty"`
	ChurnCyclesPerSecond float64 `json:"churn_cycles_per_second,omitempty"`
	ChurnCreateP50       float64 `json:"churn_create_p50,omitempty"`
	ChurnCreateP95       float64 `json:"churn_create_p95,omitempty"`
	ChurnExecP50         float64 `json:"churn_exec_p50,omitempty"`
	ChurnErrors          int     `json:"churn_errors"`
	ChurnRawCyclesPerSec float64 `json:"churn_raw_cycles_per_second,omitempty"`
	ChurnRatio           float64 `json:"churn_ratio,omitempty"`
	// The stricter anchor: raw runsc run --detach + delete cycles.
	ChurnRawRunCyclesPerSec float64 `json:"churn_raw_run_cycles_per_second,omitempty"`
	ChurnRunRatio           float64 `json:"churn_run_ratio,omitempty"`
	IdleMiBPerSandbox       float64 `json:"idle_mib_per_sandbox"`
	DensityCreateP50Empty   float64 `json:"density_create_p50_empty"`
	DensityCreateP50Held    float64 `json:"density_create_p50_held"`
	DensityCreateRatio      float64 `json:"density_create_ratio"`
	DensityExecP50Empty     float64 `json:"density_exec_p50_empty"`
	DensityExecP50Held      float64 `json:"density_exec_p50_held"`
	DensityExecRatio        float64 `json:"density_exec_ratio"`
	// LoadStart and LoadEnd are the host's 1-minute load average when the
	// run started and ended: the machine the figures were taken on.
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`

	// With --all, the pause/resume and E2B SDK figures of the same run.
	Checkpoints []CheckpointFigures `json:"checkpoints,omitempty"`
	E2B         *E2BFigures         `json:"e2b,omitempty"`

	N     int `json:"n"`
	Burst int `json:"burst"`
	Idle  int `json:"idle"`
}

// Run measures against the daemon behind c.
func Run(ctx context.Context, c *client.Client, cfg Config) (*Result, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "bench: "+format+"\n", args...) }
	r := &Result{N: cfg.N, Burst: cfg.Burst, Idle: cfg.Idle, LoadStart: loadAverage()}

	logf("warm-up")
	for range 3 {
		if _, err := createKill(ctx, c, true); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}

	// The create and time-to-interactive figures are of creates served by a
	// warm pool, so each waits (a few seconds at most) for the pool to have
	// a sandbox ready; the burst measures what happens when it runs dry.
	logf("%d sequential creates (warm pool)", cfg.N)
	var create, tti Sample
	for range cfg.N {
		waitPoolReady(ctx, c)
		d, err := createKill(ctx, c, true)
		if err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		create = append(create, d)
	}
	r.CreateP50, r.CreateP90, r.CreateP99 = create.Percentile(50), create.Percentile(90), create.Percentile(99)

	logf("%d time-to-interactive runs", cfg.N)
	for range cfg.N {
		waitPoolReady(ctx, c)
		d, err := timeToInteractive(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("time to interactive: %w", err)
		}
		tti = append(tti, d)
	}
	r.TTIP50, r.TTIP90 = tti.Percentile(50), tti.Percentile(90)

	// The loops above left the pool refilling; exec is measured on a
	// machine that is not also booting sandboxes.
	waitPoolSettled(ctx, c)
	logf("%d execs of true, and their anchors", cfg.N)
	ex, err := execLatency(ctx, c, cfg.N)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	r.ExecP50, r.ExecP90, r.ExecP95 = ex.api.Percentile(50), ex.api.Percentile(90), ex.api.Percentile(95)
	r.ExecInSandboxP50, r.ExecStaticSpawnP50, r.ExecStaticAPIP50 = ex.shSpawn, ex.staticSpawn, ex.staticAPI.Percentile(50)
	r.ExecRatio = round2(r.ExecP50 / r.ExecInSandboxP50)
	r.ExecStaticRatio = round2(r.ExecP50 / r.ExecStaticSpawnP50)
	r.TTIAnchor = round2(r.CreateP50 + r.ExecP50)
	r.TTIRatio = round2(r.TTIP50 / r.TTIAnchor)

	if err := bursts(ctx, c, cfg, r, logf); err != nil {
		return nil, err
	}

	// Cold creates boot while nothing else does: the burst above set the
	// pool refilling. Raw runsc runs alternate with them, so both see the
	// same machine.
	waitPoolSettled(ctx, c)
	var raw *rawRunsc
	if cfg.Runsc != "" && cfg.RootFS != "" {
		if raw, err = newRawRunsc(ctx, cfg.Runsc, cfg.RootFS); err != nil {
			return nil, fmt.Errorf("raw runsc: %w", err)
		}
		defer raw.close()
		logf("%d cold creates, each followed by a raw runsc create+start and a raw runsc run", cfg.Cold)
	} else {
		logf("%d cold creates", cfg.Cold)
	}
	var cold, rawRuns, rawOneStep Sample
	for range cfg.Cold {
		d, err := createKill(ctx, c, false)
		if err != nil {
			return nil, fmt.Errorf("cold create: %w", err)
		}
		cold = append(cold, d)
		if raw != nil {
			d, err := raw.once(ctx, createStart)
			if err != nil {
				return nil, fmt.Errorf("raw runsc: %w", err)
			}
			rawRuns = append(rawRuns, d)
			if d, err = raw.once(ctx, runDetach); err != nil {
				return nil, fmt.Errorf("raw runsc: %w", err)
			}
			rawOneStep = append(rawOneStep, d)
		}
	}
	r.ColdCreateP50 = cold.Percentile(50)
	if len(rawRuns) > 0 {
		r.RawRunscP50 = rawRuns.Percentile(50)
		r.ColdOverheadRatio = round2(r.ColdCreateP50 / r.RawRunscP50)
		r.RawRunscRunP50 = rawOneStep.Percentile(50)
		r.ColdOverRunRatio = round2(r.ColdCreateP50 / r.RawRunscRunP50)
		logf("%d runsc execs of sh -c true in a raw container", cfg.N)
		rawExecs, err := raw.execs(ctx, cfg.N)
		if err != nil {
			return nil, fmt.Errorf("raw runsc exec: %w", err)
		}
		r.RawRunscExecP50 = rawExecs.Percentile(50)
	}

	if cfg.ChurnCycles > 0 {
		waitPoolSettled(ctx, c)
		logf("churn: %d create/exec/write/read/kill cycles, %d at a time", cfg.ChurnCycles, cfg.ChurnConcurrency)
		sr, err := Soak(ctx, c, SoakConfig{Cycles: cfg.ChurnCycles, Concurrency: cfg.ChurnConcurrency, Runsc: cfg.Runsc, RootFS: cfg.RootFS, Log: cfg.Log})
		if err != nil {
			return nil, fmt.Errorf("churn: %w", err)
		}
		r.ChurnConcurrency, r.ChurnCyclesPerSecond, r.ChurnErrors = sr.Concurrency, sr.CyclesPerSecond, sr.Errors
		r.ChurnCreateP50, r.ChurnCreateP95, r.ChurnExecP50 = sr.Steps["create"].P50, sr.Steps["create"].P95, sr.Steps["exec"].P50
		r.ChurnRawCyclesPerSec, r.ChurnRatio = sr.RawCyclesPerSecond, sr.ChurnRatio
		r.ChurnRawRunCyclesPerSec, r.ChurnRunRatio = sr.RawRunCyclesPerSecond, sr.ChurnRunRatio
		if sr.Errors > 0 {
			logf("churn: %d cycles failed: %v", sr.Errors, sr.FirstErrors)
		}
	}

	if err := density(ctx, c, cfg, r, logf); err != nil {
		return nil, fmt.Errorf("density: %w", err)
	}
	r.LoadEnd = loadAverage()
	return r, nil
}

// loadAverage is the host's 1-minute load average (0 if unknown).
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// waitPoolReady waits until the base template's pool has a sandbox ready,
// for at most 5 s. Without pooling it returns at once.
func waitPoolReady(ctx context.Context, c *client.Client) {
	waitPoolAtLeast(ctx, c, 1, 5*time.Second)
}

// waitPoolSettled waits (for at most 3 minutes) until the pool stops
// growing for 5 s: it is full and boots nothing.
func waitPoolSettled(ctx context.Context, c *client.Client) {
	waitPoolAtLeast(ctx, c, math.MaxInt32, 3*time.Minute)
}

// waitPoolAtLeast waits until the base pool has n sandboxes ready (read from
// space_pool_ready in /metrics), or stops growing for 5 s (it is as full as
// its configuration lets it be), or timeout passes. It returns how many are
// ready (-1 when the daemon reports no pool).
func waitPoolAtLeast(ctx context.Context, c *client.Client, n int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	best, grew := -1, time.Now()
	for {
		ready := poolReady(ctx, c)
		if ready > best {
			best, grew = ready, time.Now()
		}
		if ready < 0 || ready >= n || time.Now().After(deadline) || time.Since(grew) > 5*time.Second {
			return ready
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poolReady is the base pool's ready sandboxes (-1: no pool).
func poolReady(ctx context.Context, c *client.Client) int {
	return poolOf(ctx, c, "base")
}

// metricSample reads one sample of spaced's /metrics ("name{labels}").
func metricSample(ctx context.Context, c *client.Client, series string) (float64, error) {
	text, err := c.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", series, err)
			}
			return f, nil
		}
	}
	return 0, fmt.Errorf("spaced's /metrics has no %s", series)
}

func create(ctx context.Context, c *client.Client, pool bool) (*client.Sandbox, time.Duration, error) {
	req := client.CreateSandboxRequest{TimeoutSeconds: 600}
	if !pool {
		req.Pool = &pool
	}
	start := time.Now()
	sb, err := c.CreateSandbox(ctx, req)
	return sb, time.Since(start), err
}

func createKill(ctx context.Context, c *client.Client, pool bool) (time.Duration, error) {
	sb, d, err := create(ctx, c, pool)
	if err != nil {
		return 0, err
	}
	return d, c.KillSandbox(ctx, sb.ID)
}

// runToEnd runs cmd and waits for its end event.
func runToEnd(ctx context.Context, c *client.Client, id, cmd string) error {
	st, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: cmd})
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ev.Type == "end" {
			if code := ev.Exit.Code(); code != 0 {
				return fmt.Errorf("%q exited %d", cmd, code)
			}
			return nil
		}
	}
}

func timeToInteractive(ctx context.Context, c *client.Client) (time.Duration, error) {
	start := time.Now()
	sb, _, err := create(ctx, c, true)
	if err != nil {
		return 0, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	if err := runToEnd(ctx, c, sb.ID, "echo hi"); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// round2 rounds v to two decimals. A ratio of figures not measured (0/0,
// x/0: a burst of 0, --cold 0) is 0 like the figures, not NaN, which
// --json cannot encode.
func round2(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*100) / 100
}

// killAll kills ids, eight at a time, and answers what failed.
func killAll(ctx context.Context, c *client.Client, ids []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.KillSandbox(context.WithoutCancel(ctx), id); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("kill %s: %w", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// usedMemory is MemTotal - MemAvailable from /proc/meminfo, in bytes.
func usedMemory() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, avail int64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	if total == 0 {
		return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	return (total - avail) << 10, nil
}
