package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/spacesandbox/space/client"
)

// RestDensityFigures are what holding many hibernated sandboxes costs
// while a few others work (space bench --rest-density N): the host memory
// and spaced CPU per hibernated sandbox, the wake of a random one to its
// first command, the commands of the working sandboxes and a create,
// while they are held.
type RestDensityFigures struct {
	Hibernated, Busy int
	// HostMemPerMiB is the host's used memory per hibernated sandbox over
	// the baseline with none held; ImageMiB their mean image size.
	HostMemPerMiB, ImageMiB float64
	// SpacedCPUPerMs is spaced's CPU per hibernated sandbox (ms/s over
	// SpacedCPUWindowS, the busy ones idle).
	SpacedCPUPerMs, SpacedCPUWindowS float64
	// WakeExec is exec true on a random hibernated one (the wake).
	WakeExecP50, WakeExecP99 float64
	Wakes                    int
	// BusyExec is exec true in a loop in each busy sandbox meanwhile.
	BusyExecP50, BusyExecP99 float64
	// CreateP50 is a warm create and kill meanwhile.
	CreateP50 float64
	// HoldSeconds is how long making and hibernating them took.
	HoldSeconds float64
}

// restDensity holds n hibernated sandboxes and measures what they cost
// (memory over a baseline that holds the busy sandboxes already, spaced's
// CPU while nothing else runs), then, while busy others run exec true in a
// loop, how a random one wakes, the busy commands and a create.
func restDensity(ctx context.Context, c *client.Client, n, busy int, logf func(string, ...any)) (*RestDensityFigures, error) {
	f := &RestDensityFigures{Hibernated: n, Busy: busy}
	// The busy ones are made first, so that the baseline holds them.
	var busyIDs []string
	defer func() { killAll(context.WithoutCancel(ctx), c, busyIDs) }()
	for range busy {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3600, IdleFreezeSeconds: -1})
		if err != nil {
			return nil, err
		}
		busyIDs = append(busyIDs, sb.ID)
	}
	waitPoolSettled(ctx, c)
	base, err := usedMemory()
	if err != nil {
		return nil, err
	}
	bytes0, n0 := metricValue(ctx, c, "space_sandbox_hibernate_bytes_total"), metricValue(ctx, c, "space_sandbox_hibernate_seconds_count")
	start := time.Now()
	logf("rest-density: making %d sandboxes that hibernate after 2 s", n)
	ids, err := hold(ctx, c, n)
	defer func() { killAll(context.WithoutCancel(ctx), c, ids) }()
	if err != nil {
		return nil, fmt.Errorf("held %d of %d: %w", len(ids), n, err)
	}
	for _, id := range ids {
		if _, err := c.SetIdleDelays(ctx, id, 1, 2); err != nil {
			return nil, err
		}
	}

	for _, id := range ids {
		if err := waitRest(ctx, c, id, client.RestHibernated, 10*time.Minute); err != nil {
			return nil, err
		}
	}
	f.HoldSeconds = round2(time.Since(start).Seconds())
	if k := metricValue(ctx, c, "space_sandbox_hibernate_seconds_count") - n0; k > 0 {
		f.ImageMiB = round2((metricValue(ctx, c, "space_sandbox_hibernate_bytes_total") - bytes0) / k / (1 << 20))
	}
	time.Sleep(3 * time.Second)
	used, err := usedMemory()
	if err != nil {
		return nil, err
	}
	f.HostMemPerMiB = round2(float64(used-base) / float64(len(ids)) / (1 << 20))
	const window = 20 * time.Second
	sp0, err := spacedCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	time.Sleep(window)
	sp1, err := spacedCPU(ctx, c)
	if err != nil {
		return nil, err
	}
	f.SpacedCPUWindowS = window.Seconds()
	f.SpacedCPUPerMs = round2(float64(sp1-sp0) / float64(time.Millisecond) / window.Seconds() / float64(len(ids)))

	// Now the busy ones work, until the end.
	loopCtx, stop := context.WithCancel(ctx)
	var (
		mu    sync.Mutex
		execs Sample
		wg    sync.WaitGroup
	)
	for _, id := range busyIDs {
		wg.Go(func() {
			for loopCtx.Err() == nil {
				t := time.Now()
				if err := runToEnd(loopCtx, c, id, "true"); err != nil {
					continue
				}
				mu.Lock()
				execs = append(execs, time.Since(t))
				mu.Unlock()
			}
		})
	}
	defer func() { stop(); wg.Wait() }()
	logf("rest-density: waking random hibernated ones, and creates, with %d busy", busy)
	var wakes, creates Sample
	for i := range 10 {
		id := ids[rand.IntN(len(ids))]
		if err := waitRest(ctx, c, id, client.RestHibernated, 2*time.Minute); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := runToEnd(ctx, c, id, "true"); err != nil {
			return nil, fmt.Errorf("wake %d: %w", i, err)
		}
		wakes = append(wakes, time.Since(t))
		d, err := createKill(ctx, c, true)
		if err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
		creates = append(creates, d)
	}
	f.Wakes = len(wakes)
	f.WakeExecP50, f.WakeExecP99 = wakes.Percentile(50), wakes.Percentile(99)
	f.CreateP50 = creates.Percentile(50)
	mu.Lock()
	f.BusyExecP50, f.BusyExecP99 = execs.Percentile(50), execs.Percentile(99)
	mu.Unlock()
	return f, nil
}
