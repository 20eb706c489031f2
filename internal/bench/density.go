package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spacesandbox/space/client"
)

// density holds cfg.Idle idle sandboxes and reports what each costs the
// host (the growth of MemTotal - MemAvailable over them, so the bench must
// run on spaced's host) and what holding them does to a warm create and to
// a command, against the same figures with the box empty just before.
//
// The held sandboxes skip the warm pool: a pooled sandbox was booted, and
// its memory taken, before the baseline was read, so taking them from a
// large pool measured the claim alone (3.2 MiB "per sandbox" where each
// costs the host about 19). The pool itself is settled (full, booting
// nothing) when the baseline is read and is not touched by the holds, so
// it is in both readings.
func density(ctx context.Context, c *client.Client, cfg Config, r *Result, logf func(string, ...any)) error {
	runs := max(cfg.DensityRuns, 1)
	waitPoolSettled(ctx, c)
	logf("density: %d creates and execs with the box empty", runs)
	var err error
	if r.DensityCreateP50Empty, r.DensityExecP50Empty, err = createExecP50(ctx, c, runs); err != nil {
		return err
	}
	waitPoolSettled(ctx, c)
	time.Sleep(3 * time.Second)
	before, err := usedMemory()
	if err != nil {
		return err
	}
	logf("density: holding %d idle sandboxes", cfg.Idle)
	ids, err := hold(ctx, c, cfg.Idle)
	defer func() { killAll(ctx, c, ids) }()
	if err != nil {
		return fmt.Errorf("held %d of %d: %w", len(ids), cfg.Idle, err)
	}
	time.Sleep(3 * time.Second)
	after, err := usedMemory()
	if err != nil {
		return err
	}
	per := float64(after-before) / float64(cfg.Idle) / (1 << 20)
	r.IdleMiBPerSandbox = float64(int(per*10)) / 10
	logf("density: %d creates and execs with %d held", runs, cfg.Idle)
	if r.DensityCreateP50Held, r.DensityExecP50Held, err = createExecP50(ctx, c, runs); err != nil {
		return err
	}
	r.DensityCreateRatio = round2(r.DensityCreateP50Held / r.DensityCreateP50Empty)
	r.DensityExecRatio = round2(r.DensityExecP50Held / r.DensityExecP50Empty)
	return nil
}

// hold creates n sandboxes outside the pool, a few at a time (spaced
// boots at most SPACE_MAX_BOOTS at once anyway), and returns their ids.
func hold(ctx context.Context, c *client.Client, n int) ([]string, error) {
	var (
		mu    sync.Mutex
		ids   []string
		first error
		wg    sync.WaitGroup
		next  = make(chan struct{})
	)
	for range 4 {
		wg.Go(func() {
			for range next {
				sb, _, err := create(ctx, c, false)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				} else if err == nil {
					ids = append(ids, sb.ID)
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return ids, first
}

// createExecP50 is the p50 of n warm creates (each waits for a ready pool
// sandbox and is killed after) and of n runs of true in one sandbox.
func createExecP50(ctx context.Context, c *client.Client, n int) (createP50, execP50 float64, err error) {
	var creates Sample
	for range n {
		waitPoolReady(ctx, c)
		d, err := createKill(ctx, c, true)
		if err != nil {
			return 0, 0, fmt.Errorf("create: %w", err)
		}
		creates = append(creates, d)
	}
	waitPoolReady(ctx, c)
	sb, _, err := create(ctx, c, true)
	if err != nil {
		return 0, 0, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	execs, err := timeRuns(n, func() error { return runToEnd(ctx, c, sb.ID, "true") })
	if err != nil {
		return 0, 0, fmt.Errorf("exec: %w", err)
	}
	return creates.Percentile(50), execs.Percentile(50), nil
}
