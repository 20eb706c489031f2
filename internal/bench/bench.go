package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	// Idle is how many sandboxes are held to measure memory per sandbox.
	Idle int
	// Runsc and RootFS, when set, enable the raw runsc comparison (root only).
	Runsc  string
	RootFS string
	// Log receives progress lines.
	Log io.Writer
}

// Quick is the configuration CI runs: small counts, same code paths.
func Quick() Config { return Config{N: 10, Burst: 10, Cold: 3, Idle: 5} }

// Full is the configuration docs/benchmarks.md reports.
func Full() Config { return Config{N: 200, Burst: 100, Cold: 30, Idle: 100} }

// Result holds the figures, milliseconds unless named otherwise.
type Result struct {
	CreateP50 float64 `json:"create_p50"`
	CreateP90 float64 `json:"create_p90"`
	CreateP99 float64 `json:"create_p99"`
	TTIP50    float64 `json:"tti_p50"`
	TTIP90    float64 `json:"tti_p90"`
	ExecP50   float64 `json:"exec_p50"`
	ExecP90   float64 `json:"exec_p90"`
	// The exec anchors: the same command (sh -c true) spawned and waited
	// for inside the sandbox, timed there (gVisor's own floor for it, with
	// no agent, stream or HTTP); and `runsc exec` of it in a raw container
	// (what a caller of runsc itself pays). ExecRatio is ExecP50 over the
	// first.
	ExecInSandboxP50 float64 `json:"exec_in_sandbox_p50"`
	RawRunscExecP50  float64 `json:"raw_runsc_exec_p50,omitempty"`
	ExecRatio        float64 `json:"exec_ratio"`
	// TTIAnchor is CreateP50 + ExecP50: what a claim and a command cost
	// apart; TTIRatio is TTIP50 over it.
	TTIAnchor         float64 `json:"tti_anchor"`
	TTIRatio          float64 `json:"tti_ratio"`
	BurstP50          float64 `json:"burst_p50"`
	BurstP95          float64 `json:"burst_p95"`
	ColdCreateP50     float64 `json:"cold_create_p50"`
	RawRunscP50       float64 `json:"raw_runsc_p50"`
	ColdOverheadRatio float64 `json:"cold_overhead_ratio"`
	IdleMiBPerSandbox float64 `json:"idle_mib_per_sandbox"`
	// BurstPoolReady is how many pooled sandboxes were ready when the burst
	// started (-1 when the daemon reports no pool).
	BurstPoolReady int `json:"burst_pool_ready"`

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
	r := &Result{N: cfg.N, Burst: cfg.Burst, Idle: cfg.Idle}

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
	logf("%d execs of true", cfg.N)
	execs, inSandbox, err := execLatency(ctx, c, cfg.N)
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	r.ExecP50, r.ExecP90, r.ExecInSandboxP50 = execs.Percentile(50), execs.Percentile(90), inSandbox
	r.ExecRatio = round2(r.ExecP50 / r.ExecInSandboxP50)
	r.TTIAnchor = r.CreateP50 + r.ExecP50
	r.TTIRatio = round2(r.TTIP50 / r.TTIAnchor)

	// The loops above drain the pool faster than it refills; the burst is
	// measured against the pool as the operator sized it, so let it refill
	// (for at most 3 minutes) and report how many were ready.
	r.BurstPoolReady = waitPoolAtLeast(ctx, c, cfg.Burst, 3*time.Minute)
	logf("burst of %d creates (%d sandboxes ready in the pool)", cfg.Burst, r.BurstPoolReady)
	burst, err := burstCreates(ctx, c, cfg.Burst)
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	r.BurstP50, r.BurstP95 = burst.Percentile(50), burst.Percentile(95)

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
		logf("%d cold creates, each followed by a raw runsc create+start", cfg.Cold)
	} else {
		logf("%d cold creates", cfg.Cold)
	}
	var cold, rawRuns Sample
	for range cfg.Cold {
		d, err := createKill(ctx, c, false)
		if err != nil {
			return nil, fmt.Errorf("cold create: %w", err)
		}
		cold = append(cold, d)
		if raw != nil {
			d, err := raw.once(ctx)
			if err != nil {
				return nil, fmt.Errorf("raw runsc: %w", err)
			}
			rawRuns = append(rawRuns, d)
		}
	}
	r.ColdCreateP50 = cold.Percentile(50)
	if len(rawRuns) > 0 {
		r.RawRunscP50 = rawRuns.Percentile(50)
		r.ColdOverheadRatio = round2(r.ColdCreateP50 / r.RawRunscP50)
		logf("%d runsc execs of sh -c true in a raw container", cfg.N)
		rawExecs, err := raw.execs(ctx, cfg.N)
		if err != nil {
			return nil, fmt.Errorf("raw runsc exec: %w", err)
		}
		r.RawRunscExecP50 = rawExecs.Percentile(50)
	}

	logf("memory of %d idle sandboxes", cfg.Idle)
	if r.IdleMiBPerSandbox, err = idleMemory(ctx, c, cfg.Idle); err != nil {
		return nil, fmt.Errorf("idle memory: %w", err)
	}
	return r, nil
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

func poolReady(ctx context.Context, c *client.Client) int {
	text, err := c.Metrics(ctx)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, `space_pool_ready{template="base"} `); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return int(v)
		}
	}
	return -1
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

// spawnTimer times spawns of argv[1:] inside a sandbox and prints the
// median in milliseconds.
const spawnTimer = `import subprocess, sys, time
runs = []
for i in range(int(sys.argv[1]) + 5):
    t = time.perf_counter()
    subprocess.run(sys.argv[2:], check=True)
    if i >= 5:
        runs.append(time.perf_counter() - t)
runs.sort()
print(runs[len(runs) // 2] * 1000)
`

// execLatency times n runs of true through the API in one sandbox, and the
// same command spawned inside it (the anchor).
func execLatency(ctx context.Context, c *client.Client, n int) (Sample, float64, error) {
	sb, _, err := create(ctx, c, true)
	if err != nil {
		return nil, 0, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	var s Sample
	for i := range n + 5 {
		start := time.Now()
		if err := runToEnd(ctx, c, sb.ID, "true"); err != nil {
			return nil, 0, err
		}
		if i >= 5 { // the first few warm the connection and the page cache
			s = append(s, time.Since(start))
		}
	}
	if _, err := c.Upload(ctx, sb.ID, "/tmp/spawn.py", strings.NewReader(spawnTimer)); err != nil {
		return nil, 0, err
	}
	out, err := runOutput(ctx, c, sb.ID, fmt.Sprintf("python3 /tmp/spawn.py %d /bin/sh -c true", n))
	if err != nil {
		return nil, 0, fmt.Errorf("spawns inside the sandbox: %w", err)
	}
	inside, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		return nil, 0, fmt.Errorf("spawns inside the sandbox printed %q", out)
	}
	return s, inside, nil
}

// round2 rounds a ratio to two decimals.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

func burstCreates(ctx context.Context, c *client.Client, n int) (Sample, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		s    Sample
		ids  []string
		errs []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, d, err := create(ctx, c, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			s = append(s, d)
			ids = append(ids, sb.ID)
		}()
	}
	wg.Wait()
	killAll(ctx, c, ids)
	return s, errors.Join(errs...)
}

func killAll(ctx context.Context, c *client.Client, ids []string) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.KillSandbox(context.WithoutCancel(ctx), id); err != nil {
				slog.Warn("bench: kill", "sandbox", id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// idleMemory holds n idle sandboxes and reports the growth of the host's
// used memory per sandbox (so it must run on spaced's host). The creates
// skip the warm pool: a pooled sandbox was booted, and its memory taken,
// before the baseline was read, so taking n from a large pool measured the
// claim alone (3.2 MiB "per sandbox" where each costs the host about 19).
func idleMemory(ctx context.Context, c *client.Client, n int) (float64, error) {
	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	before, err := usedMemory()
	if err != nil {
		return 0, err
	}
	var ids []string
	defer func() { killAll(ctx, c, ids) }()
	for range n {
		sb, _, err := create(ctx, c, false)
		if err != nil {
			return 0, err
		}
		ids = append(ids, sb.ID)
	}
	settle()
	after, err := usedMemory()
	if err != nil {
		return 0, err
	}
	per := float64(after-before) / float64(n) / (1 << 20)
	return float64(int(per*10)) / 10, nil
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
