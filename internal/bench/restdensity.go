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
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 6 * 3600, IdleFreezeSeconds: -1, IdleHibernateSeconds: -1})
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
	logf("rest-density: making %d sandboxes that hibernate after 2 s, at most %d awake at once", n, holdAwake)
	ids, err := holdHibernated(ctx, c, n, logf)
	defer func() { killAll(context.WithoutCancel(ctx), c, ids) }()
	if err != nil {
		return nil, fmt.Errorf("held %d of %d: %w", len(ids), n, err)
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

// holdAwake bounds the held sandboxes not yet hibernated: a node holds
// 10,000 hibernated ones but only about a thousand awake.
const holdAwake = 48

// holdHibernated makes n cold sandboxes that hibernate 2 s after their
// create (4 creates at a time, at most holdAwake awake at once) and
// returns those that did, in order. Their timeout outlasts a hold of
// 10,000 (about an hour on 2 cores).
func holdHibernated(ctx context.Context, c *client.Client, n int, logf func(string, ...any)) ([]string, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		awake   = make(chan struct{}, holdAwake)
		made    = make(chan string, holdAwake)
		next    = make(chan struct{})
		workers sync.WaitGroup
	)
	noPool := false
	for range 4 {
		workers.Go(func() {
			for range next {
				sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
					TimeoutSeconds: 6 * 3600, Pool: &noPool, IdleFreezeSeconds: 1, IdleHibernateSeconds: 2,
				})
				if err != nil {
					cancel(fmt.Errorf("create: %w", err))
					<-awake
					continue
				}
				made <- sb.ID
			}
		})
	}
	go func() {
		defer close(made)
		defer workers.Wait()
		defer close(next)
		for range n {
			select {
			case awake <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case next <- struct{}{}:
			case <-ctx.Done():
				<-awake
				return
			}
		}
	}()
	var ids []string
	start := time.Now()
	for id := range made {
		ids = append(ids, id)
		if err := waitRest(ctx, c, id, client.RestHibernated, 10*time.Minute); err != nil {
			cancel(err)
			continue
		}
		<-awake
		if k := len(ids); k%250 == 0 {
			logf("rest-density: %d hibernated in %s (%.1f/s)", k, time.Since(start).Round(time.Second), float64(k)/time.Since(start).Seconds())
		}
	}
	if err := context.Cause(ctx); err != nil {
		return ids, err
	}
	return ids, nil
}
