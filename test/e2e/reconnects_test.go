package e2e

import (
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/bench"
	"github.com/spacesandbox/space/test/harness"
)

// TestReconnectsUnderCuts runs space bench --reconnects at a scale CI
// affords (issue 24 item 7): 200 command streams over 4 sandboxes for
// 20 s, each client through a proxy that resets its connections after
// 1,500 bytes on average and resuming with Last-Event-ID. Every numbered
// line must arrive exactly once and in order, and every stream end with
// its exit; cuts and reconnects must really have happened. The control
// runs the same without resuming through the same cuts: lines are lost,
// so the check can fail.
func TestReconnectsUnderCuts(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "reconnects", CIDR: "10.241.236.0/22", NoPool: true})
	t.Run("resumed", func(t *testing.T) {
		var res bench.ReconnectFigures
		// The bench itself exits non-zero on any loss; the figures are
		// checked here again, with the positive controls.
		d.Bench(t, &res, "--reconnects", "--reconnect-streams", "200", "--reconnect-sandboxes", "4",
			"--reconnect-duration", "20s", "--reconnect-interval", "250ms", "--cut-mean-bytes", "1500", "--cut-seed", "24")
		if res.Lost != 0 || res.Repeated != 0 || res.OutOfOrder != 0 || res.LostEvents != 0 || res.Gaps != 0 {
			t.Errorf("lines lost %d, repeated %d, out of order %d; event ids skipped %d, gaps %d", res.Lost, res.Repeated, res.OutOfOrder, res.LostEvents, res.Gaps)
		}
		if res.MissingEnd != 0 || res.Failed != 0 {
			t.Errorf("%d streams without their end, %d failed (first: %s)", res.MissingEnd, res.Failed, res.FirstError)
		}
		// 200 streams of about 20 s at up to 4 lines a second (fewer on a
		// loaded machine: the wait is 250 ms after each line).
		if res.Lines < 200*20 {
			t.Errorf("only %d lines came", res.Lines)
		}
		// Positive controls: the proxy cut, and the streams resumed.
		if res.Cuts < 100 || res.Reconnects < res.Cuts/2 {
			t.Errorf("%d cuts, %d reconnects: want at least 100 cuts, and a reconnect for most", res.Cuts, res.Reconnects)
		}
	})
	t.Run("control without resume", func(t *testing.T) {
		res, err := bench.Reconnects(harness.Ctx(t, 3*time.Minute), d.Client, bench.ReconnectConfig{
			Addr: d.Addr, APIKey: d.APIKey, Streams: 20, Sandboxes: 1, Duration: 8 * time.Second,
			Interval: 250 * time.Millisecond, CutMeanBytes: 1500, Seed: 24, NoResume: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", *res)
		if res.Cuts == 0 || res.Reconnects != 0 {
			t.Fatalf("%d cuts, %d reconnects: want cuts and no reconnect", res.Cuts, res.Reconnects)
		}
		if res.Lost == 0 || res.Failed == 0 {
			t.Errorf("without resuming, %d lines lost and %d streams failed: the check would not see a loss", res.Lost, res.Failed)
		}
	})
}
