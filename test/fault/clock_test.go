package fault

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestClockJump steps the host's wall clock forward and back while spaced
// runs: every sandbox keeps the lifetime it had left (none is reaped early
// or kept late), keeps working, and a short timeout still ends on time.
//
// It changes the clock of the whole host, so it runs only when asked
// (SPACE_TEST_CLOCK_JUMP=1), alone, after the other suites
// (scripts/test.sh); the clock is put back from the monotonic clock
// whatever happens.
func TestClockJump(t *testing.T) {
	if os.Getenv("SPACE_TEST_CLOCK_JUMP") != "1" {
		t.Skip("steps the host clock: runs alone with SPACE_TEST_CLOCK_JUMP=1 (scripts/test.sh does)")
	}
	d := ownDaemon(t, harness.Options{Name: "clock", CIDR: "10.246.112.0/20"})
	ctx := harness.Ctx(t, 3*time.Minute)
	long, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	short, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 20})
	if err != nil {
		t.Fatal(err)
	}

	// Step the clock by step; put it back at cleanup, however the test ends.
	base, mono := time.Now(), time.Now()
	var stepped time.Duration
	setClock := func(step time.Duration) {
		t.Helper()
		want := base.Round(0).Add(time.Since(mono) + step)
		ts := unix.NsecToTimespec(want.UnixNano())
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			t.Fatalf("step the clock: %v", err)
		}
		stepped = step
	}
	t.Cleanup(func() {
		if stepped != 0 {
			setClock(0)
		}
	})
	leftOf := func(id string) time.Duration {
		t.Helper()
		sb, err := d.Client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != client.StateRunning {
			t.Fatalf("sandbox %s is %s (%s) after the clock step", id, sb.State, sb.Reason)
		}
		return time.Until(sb.ExpiresAt)
	}
	before := leftOf(long.ID)

	for _, step := range []time.Duration{2 * time.Hour, -3 * time.Hour} {
		setClock(stepped + step)
		time.Sleep(3 * time.Second) // a few reaper ticks
		left := leftOf(long.ID)
		if diff := left - before; diff > 10*time.Second || diff < -15*time.Second {
			t.Errorf("after a step of %s the sandbox has %s left, had %s", step, left.Round(time.Second), before.Round(time.Second))
		}
		if out := run(t, d, long.ID, "echo alive"); out != "alive\n" {
			t.Errorf("after a step of %s: echo printed %q", step, out)
		}
		t.Logf("step %s: %s left (had %s)", step, left.Round(time.Second), before.Round(time.Second))
	}
	// The short sandbox ends at its own time, not at a stepped one.
	if !harness.WaitFor(40*time.Second, func() bool {
		sb, err := d.Client.GetSandbox(ctx, short.ID)
		return err == nil && sb.State == client.StateKilled
	}) {
		t.Error("the 20 s sandbox did not end at its timeout")
	}
	setClock(0)
	time.Sleep(2 * time.Second)
	if left := leftOf(long.ID); left < before-time.Minute {
		t.Errorf("after the clock was put back the sandbox has %s left, had %s", left.Round(time.Second), before.Round(time.Second))
	}
}
