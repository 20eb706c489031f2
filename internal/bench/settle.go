package bench

import (
	"context"
	"fmt"
	"io"
	"time"
)

// QuietCores is how busy the host may be (in cores, over a second) for
// Settle to call it quiet: spaced and a few idle sandboxes, not the
// teardown of a previous run's hundreds.
const QuietCores = 0.25

// Settle waits, for at most max, until the host's CPUs were busy for less
// than QuietCores over one second, and says on log how long that took. A
// run started right after another (or after spaced's restart) would
// otherwise measure the previous run's teardown: its figures scatter by
// more than the differences they are meant to show. It returns the last
// second's busy cores; past max it goes on and says so.
func Settle(ctx context.Context, max time.Duration, log io.Writer) (float64, error) {
	if max <= 0 {
		return 0, nil
	}
	start := time.Now()
	prev, err := hostBusy()
	if err != nil {
		return 0, err
	}
	then := start
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
		cur, err := hostBusy()
		if err != nil {
			return 0, err
		}
		now := time.Now()
		busy := float64(cur-prev) / float64(now.Sub(then))
		prev, then = cur, now
		waited := now.Sub(start).Round(100 * time.Millisecond)
		switch {
		case busy < QuietCores:
			fmt.Fprintf(log, "host quiet after %s (%.2f cores busy)\n", waited, busy)
			return busy, nil
		case now.Sub(start) >= max:
			fmt.Fprintf(log, "host still busy after %s (%.2f cores): measuring anyway\n", waited, busy)
			return busy, nil
		}
	}
}
