package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

// RestConfig configures the rest-tier figures (space bench --rest): what
// waking a sandbox frozen at rest costs its first command, and what an
// idle sandbox costs the host's CPU awake and frozen. It reads the host's
// /proc/stat and the sandboxes' cgroups, so it runs on spaced's host.
type RestConfig struct {
	// N is the wakes timed (and the commands on an awake sandbox beside
	// them).
	N int
	// Held is the idle sandboxes whose CPU is measured; Window how long.
	Held   int
	Window time.Duration
	// Hibernated is the wakes of a hibernated sandbox timed (0: none).
	Hibernated int
	// Density, when set, also holds that many hibernated sandboxes while
	// Busy others run commands in a loop (RestFigures.Density).
	Density, Busy int
	// Runsc and RootFS, when set, add the hibernated wake's anchor: raw
	// runsc restore of an idle container and its first exec (root only).
	Runsc, RootFS string
	Log           io.Writer
}

// RestFigures are the rest-tier figures, in ms (CPU: ms of CPU per second
// of wall time).
type RestFigures struct {
	// WakeExec is exec true on a sandbox frozen at rest (thaw + command);
	// AwakeExec the same command on an awake sandbox, alternating with
	// it; WakeOverAwakeP50 the difference of the p50s.
	WakeExecP50, WakeExecP99   float64
	AwakeExecP50, AwakeExecP99 float64
	WakeOverAwakeP50           float64
	N                          int
	// HibernatedWakeExec is exec true on a hibernated sandbox (restore in
	// place + command); RawRestoreExec its anchor, raw runsc restore of an
	// idle container's image and its first exec, measured between them;
	// HibernatedWakeRatio the ratio of the p50s.
	HibernatedWakeExecP50, HibernatedWakeExecP99 float64
	RawRestoreExecP50, RawRestoreExecP99         float64
	HibernatedWakeRatio                          float64
	HibernatedN                                  int
	// Held idle sandboxes measured over WindowSeconds: the host's busy
	// CPU with none held (HostCPUEmpty), and per sandbox over it, awake
	// and frozen; and per sandbox by its own cgroup's cpuacct (what its
	// sentry, gofer and stubs used).
	Held                                  int
	WindowSeconds                         float64
	HostCPUEmpty                          float64
	HostCPUPerAwake, HostCPUPerFrozen     float64
	CgroupCPUPerAwake, CgroupCPUPerFrozen float64
	// spaced's own CPU (its process_cpu_seconds_total) with none held,
	// and per sandbox over it, awake and frozen.
	SpacedCPUEmpty                        float64
	SpacedCPUPerAwake, SpacedCPUPerFrozen float64
	// The same sandboxes hibernated: host and spaced CPU per sandbox (its
	// own cgroup is gone), and the host's used memory (MemTotal -
	// MemAvailable) per sandbox over the empty host's in each tier, in
	// MiB; HibernationImageMiB is the mean size of their images on disk.
	HostCPUPerHibernated, SpacedCPUPerHibernated            float64
	HostMemPerAwake, HostMemPerFrozen, HostMemPerHibernated float64
	HibernationImageMiB                                     float64
	Density                                                 *RestDensityFigures `json:",omitempty"`
	LoadStart, LoadEnd                                      float64
}

// Rest measures the rest-tier figures.
func Rest(ctx context.Context, c *client.Client, cfg RestConfig) (*RestFigures, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	r := &RestFigures{N: cfg.N, Held: cfg.Held, WindowSeconds: cfg.Window.Seconds(), LoadStart: loadAverage()}
	if err := wakeFigures(ctx, c, cfg, r, logf); err != nil {
		return nil, err
	}
	if err := hibernatedWakeFigures(ctx, c, cfg, r, logf); err != nil {
		return nil, err
	}
	if err := idleCPUFigures(ctx, c, cfg, r, logf); err != nil {
		return nil, err
	}
	if cfg.Density > 0 {
		d, err := restDensity(ctx, c, cfg.Density, cfg.Busy, logf)
		if err != nil {
			return nil, fmt.Errorf("rest density: %w", err)
		}
		r.Density = d
	}
	r.LoadEnd = loadAverage()
	return r, nil
}

// wakeFigures times exec true on a sandbox that rests frozen (waiting for
// it to freeze again before each run) and, alternating, on one that
// never rests.
func wakeFigures(ctx context.Context, c *client.Client, cfg RestConfig, r *RestFigures, logf func(string, ...any)) error {
	resting, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3600, IdleFreezeSeconds: 1})
	if err != nil {
		return err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), resting.ID)
	awake, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3600, IdleFreezeSeconds: -1})
	if err != nil {
		return err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), awake.ID)
	logf("rest: %d wakes of a frozen sandbox to its first command, beside an awake one", cfg.N)
	var wakes, awakes Sample
	for i := range cfg.N + 2 {
		if err := waitRest(ctx, c, resting.ID, client.RestFrozen, time.Minute); err != nil {
			return err
		}
		start := time.Now()
		if err := runToEnd(ctx, c, resting.ID, "true"); err != nil {
			return fmt.Errorf("wake: %w", err)
		}
		wake := time.Since(start)
		start = time.Now()
		if err := runToEnd(ctx, c, awake.ID, "true"); err != nil {
			return fmt.Errorf("awake exec: %w", err)
		}
		if i >= 2 { // the first two warm both connections
			wakes, awakes = append(wakes, wake), append(awakes, time.Since(start))
		}
	}
	r.WakeExecP50, r.WakeExecP99 = wakes.Percentile(50), wakes.Percentile(99)
	r.AwakeExecP50, r.AwakeExecP99 = awakes.Percentile(50), awakes.Percentile(99)
	r.WakeOverAwakeP50 = round2(r.WakeExecP50 - r.AwakeExecP50)
	return nil
}

// hibernatedWakeFigures times exec true on a sandbox that rests
// hibernated (waiting for it to hibernate again before each run) and,
// between the runs, raw runsc restore of an idle container plus its first
// exec.
func hibernatedWakeFigures(ctx context.Context, c *client.Client, cfg RestConfig, r *RestFigures, logf func(string, ...any)) error {
	if cfg.Hibernated <= 0 {
		return nil
	}
	var raw *rawCheckpoint
	if cfg.Runsc != "" {
		var err error
		if raw, err = newRawCheckpoint(ctx, cfg.Runsc, cfg.RootFS, 0); err != nil {
			return fmt.Errorf("raw runsc anchor: %w", err)
		}
		defer raw.close()
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3600, IdleFreezeSeconds: 1, IdleHibernateSeconds: 2})
	if err != nil {
		return err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	logf("rest: %d wakes of a hibernated sandbox to its first command, beside raw runsc restores", cfg.Hibernated)
	var wakes, raws Sample
	for range cfg.Hibernated {
		if err := waitRest(ctx, c, sb.ID, client.RestHibernated, time.Minute); err != nil {
			return err
		}
		start := time.Now()
		if err := runToEnd(ctx, c, sb.ID, "true"); err != nil {
			return fmt.Errorf("wake from hibernation: %w", err)
		}
		wakes = append(wakes, time.Since(start))
		if raw == nil {
			continue
		}
		_, image, err := raw.checkpoint(ctx)
		if err != nil {
			return err
		}
		_, first, err := raw.restore(ctx, image)
		if err != nil {
			return err
		}
		raws = append(raws, first)
	}
	r.HibernatedN = cfg.Hibernated
	r.HibernatedWakeExecP50, r.HibernatedWakeExecP99 = wakes.Percentile(50), wakes.Percentile(99)
	if raw != nil {
		r.RawRestoreExecP50, r.RawRestoreExecP99 = raws.Percentile(50), raws.Percentile(99)
		r.HibernatedWakeRatio = round2(r.HibernatedWakeExecP50 / r.RawRestoreExecP50)
	}
	return nil
}

func waitRest(ctx context.Context, c *client.Client, id, want string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		sb, err := c.GetSandboxRest(ctx, id)
		if err != nil {
			return err
		}
		if string(sb.Rest) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox %s not %s within %s", id, want, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// idleCPUFigures holds cfg.Held idle sandboxes awake, then frozen, and
// reads the host's busy CPU and theirs over cfg.Window each time, beside
// the host's with none held just before.
func idleCPUFigures(ctx context.Context, c *client.Client, cfg RestConfig, r *RestFigures, logf func(string, ...any)) error {
	waitPoolSettled(ctx, c)
	logf("rest: host CPU over %s with no sandbox held", cfg.Window)
	empty, _, spacedEmpty, err := cpuOver(ctx, c, cfg.Window, nil)
	if err != nil {
		return err
	}
	r.HostCPUEmpty, r.SpacedCPUEmpty = round2(empty), round2(spacedEmpty)
	memEmpty, err := usedMemory()
	if err != nil {
		return err
	}
	memPer := func(n int) (float64, error) {
		used, err := usedMemory()
		return round2(float64(used-memEmpty) / float64(n) / (1 << 20)), err
	}
	logf("rest: holding %d idle sandboxes awake", cfg.Held)
	ids, err := hold(ctx, c, cfg.Held)
	defer func() { killAll(ctx, c, ids) }()
	if err != nil {
		return fmt.Errorf("held %d of %d: %w", len(ids), cfg.Held, err)
	}
	for _, id := range ids {
		if _, err := c.SetIdleFreeze(ctx, id, -1); err != nil {
			return err
		}
	}
	waitPoolSettled(ctx, c)
	time.Sleep(5 * time.Second) // the boots' own work settles
	host, sbs, spaced, err := cpuOver(ctx, c, cfg.Window, ids)
	if err != nil {
		return err
	}
	r.HostCPUPerAwake = round2((host - empty) / float64(len(ids)))
	r.CgroupCPUPerAwake = round2(sbs / float64(len(ids)))
	r.SpacedCPUPerAwake = round2((spaced - spacedEmpty) / float64(len(ids)))
	if r.HostMemPerAwake, err = memPer(len(ids)); err != nil {
		return err
	}
	logf("rest: freezing them")
	for _, id := range ids {
		if _, err := c.SetIdleFreeze(ctx, id, 1); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if err := waitRest(ctx, c, id, client.RestFrozen, 2*time.Minute); err != nil {
			return err
		}
	}
	logf("rest: host CPU over %s with %d frozen", cfg.Window, len(ids))
	host, sbs, spaced, err = cpuOver(ctx, c, cfg.Window, ids)
	if err != nil {
		return err
	}
	r.HostCPUPerFrozen = round2((host - empty) / float64(len(ids)))
	r.CgroupCPUPerFrozen = round2(sbs / float64(len(ids)))
	r.SpacedCPUPerFrozen = round2((spaced - spacedEmpty) / float64(len(ids)))
	if r.HostMemPerFrozen, err = memPer(len(ids)); err != nil {
		return err
	}
	if cfg.Hibernated <= 0 {
		return nil
	}
	logf("rest: hibernating them")
	bytes0, n0 := metricValue(ctx, c, "space_sandbox_hibernate_bytes_total"), metricValue(ctx, c, "space_sandbox_hibernate_seconds_count")
	for _, id := range ids {
		if _, err := c.SetIdleDelays(ctx, id, 1, 2); err != nil {
			return err
		}
	}
	for _, id := range ids {
		if err := waitRest(ctx, c, id, client.RestHibernated, 2*time.Minute); err != nil {
			return err
		}
	}
	if n := metricValue(ctx, c, "space_sandbox_hibernate_seconds_count") - n0; n > 0 {
		r.HibernationImageMiB = round2((metricValue(ctx, c, "space_sandbox_hibernate_bytes_total") - bytes0) / n / (1 << 20))
	}
	logf("rest: host CPU over %s with %d hibernated", cfg.Window, len(ids))
	host, _, spaced, err = cpuOver(ctx, c, cfg.Window, nil)
	if err != nil {
		return err
	}
	r.HostCPUPerHibernated = round2((host - empty) / float64(len(ids)))
	r.SpacedCPUPerHibernated = round2((spaced - spacedEmpty) / float64(len(ids)))
	r.HostMemPerHibernated, err = memPer(len(ids))
	return err
}

// metricValue is one sample of spaced's /metrics, 0 if it is not there.
func metricValue(ctx context.Context, c *client.Client, series string) float64 {
	v, _ := metricSample(ctx, c, series)
	return v
}

// cpuOver is the host's busy CPU, the sum of ids' cgroup CPU and
// spaced's own over d, in ms per second.
func cpuOver(ctx context.Context, c *client.Client, d time.Duration, ids []string) (host, sandboxes, spaced float64, err error) {
	cg0, err := cgroupsCPU(ids)
	if err != nil {
		return 0, 0, 0, err
	}
	sp0, err := spacedCPU(ctx, c)
	if err != nil {
		return 0, 0, 0, err
	}
	host, err = hostBusyOver(d)
	if err != nil {
		return 0, 0, 0, err
	}
	cg1, err := cgroupsCPU(ids)
	if err != nil {
		return 0, 0, 0, err
	}
	sp1, err := spacedCPU(ctx, c)
	if err != nil {
		return 0, 0, 0, err
	}
	perSecond := func(v time.Duration) float64 { return float64(v) / float64(time.Millisecond) / d.Seconds() }
	return host, perSecond(cg1 - cg0), perSecond(sp1 - sp0), nil
}

// spacedCPU is spaced's CPU time so far, from its /metrics.
func spacedCPU(ctx context.Context, c *client.Client) (time.Duration, error) {
	s, err := metricSample(ctx, c, "process_cpu_seconds_total")
	return time.Duration(s * float64(time.Second)), err
}

// hostBusyOver is the host's busy CPU time (all but idle and iowait, from
// /proc/stat) over d, in ms per second.
func hostBusyOver(d time.Duration) (float64, error) {
	b0, err := hostBusy()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	b1, err := hostBusy()
	if err != nil {
		return 0, err
	}
	return float64(b1-b0) / float64(time.Millisecond) / time.Since(start).Seconds(), nil
}

// hostBusy reads /proc/stat's cpu line: the busy time of every CPU so far.
func hostBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseHostBusy(string(data))
}

// parseHostBusy is hostBusy's reading of /proc/stat's text.
func parseHostBusy(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i < 7 { // not idle, iowait, steal; guest time is in user already
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond, nil // USER_HZ is 100
}

// cgroupsCPU sums the CPU time used so far by the cgroups the gVisor
// driver makes for ids (cgroup v1 cpuacct, else v2 cpu.stat).
func cgroupsCPU(ids []string) (time.Duration, error) {
	var sum time.Duration
	for _, id := range ids {
		if raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct/space", id, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				return 0, err
			}
			sum += time.Duration(ns)
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/space", id, "cpu.stat"))
		if err != nil {
			return 0, fmt.Errorf("CPU of sandbox %s: no cgroup v1 cpuacct or v2 cpu.stat (run the bench on spaced's host, as root): %w", id, err)
		}
		found := false
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, err
				}
				sum, found = sum+time.Duration(us)*time.Microsecond, true
			}
		}
		if !found {
			return 0, fmt.Errorf("CPU of sandbox %s: no usage_usec in its cpu.stat", id)
		}
	}
	return sum, nil
}
