package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spacesandbox/space/client"
)

// bursts measures a burst of cfg.Burst creates against the pool as the
// daemon is configured, then the anchor: the same burst against a pool
// raised, through the admin API, until it holds the whole burst (the
// pool is put back as it was after). Without the admin key, or without a
// pool, there is no anchor.
func bursts(ctx context.Context, c *client.Client, cfg Config, r *Result, logf func(string, ...any)) error {
	// The loops before drain the pool faster than it refills; the burst
	// meets the pool as its configuration sizes it when it has settled.
	waitPoolSettled(ctx, c)
	r.BurstPoolReady = poolReady(ctx, c)
	logf("burst of %d creates at the daemon's configuration (%d sandboxes ready in the pool)", cfg.Burst, r.BurstPoolReady)
	burst, err := burstCreates(ctx, c, cfg.Burst)
	if err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	r.BurstP50, r.BurstP95 = burst.Percentile(50), burst.Percentile(95)

	pools, err := c.Pools(ctx)
	if err != nil {
		logf("no full-pool anchor for the burst: %v", err)
		return nil
	}
	var was *client.Pool
	for i := range pools {
		if pools[i].Template == "base" {
			was = &pools[i]
		}
	}
	if was == nil {
		logf("no full-pool anchor for the burst: the daemon has no pool of base")
		return nil
	}
	full := cfg.Burst + max(2, cfg.Burst/10)
	if _, err := c.SetPool(ctx, "base", full, max(full, was.Max)); err != nil {
		return fmt.Errorf("raise the pool for the burst's anchor: %w", err)
	}
	defer func() {
		if _, err := c.SetPool(context.WithoutCancel(ctx), "base", was.Min, was.Max); err != nil {
			logf("could not put the pool back to %d:%d: %v", was.Min, was.Max, err)
		}
	}()
	r.BurstFullPoolReady = waitPoolFull(ctx, c, cfg.Burst, 10*time.Minute)
	logf("burst of %d creates against a full pool (%d ready)", cfg.Burst, r.BurstFullPoolReady)
	anchor, err := burstCreates(ctx, c, cfg.Burst)
	if err != nil {
		return fmt.Errorf("burst against a full pool: %w", err)
	}
	r.BurstFullPoolP50, r.BurstFullPoolP95 = anchor.Percentile(50), anchor.Percentile(95)
	r.BurstRatio = round2(r.BurstP50 / r.BurstFullPoolP50)
	return nil
}

// waitPoolFull waits until the base pool has at least n ready and boots
// nothing more (its target reached), or timeout passes; it returns how
// many are ready.
func waitPoolFull(ctx context.Context, c *client.Client, n int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		ready := -1
		if pools, err := c.Pools(ctx); err == nil {
			for _, p := range pools {
				if p.Template == "base" {
					ready = p.Ready
					if p.Ready >= n && p.Booting == 0 {
						return ready
					}
				}
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return ready
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// burstCreates fires n creates at once and returns each one's latency;
// the sandboxes are killed after.
func burstCreates(ctx context.Context, c *client.Client, n int) (Sample, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		s    Sample
		ids  []string
		errs []error
	)
	for range n {
		wg.Go(func() {
			sb, d, err := create(ctx, c, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			s = append(s, d)
			ids = append(ids, sb.ID)
		})
	}
	wg.Wait()
	killAll(ctx, c, ids)
	return s, errors.Join(errs...)
}
