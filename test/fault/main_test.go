// Package fault injects faults into a real spaced with real gVisor sandboxes
// (kill -9 of spaced mid-create and mid-exec, of a sandbox's runsc
// processes, a full data disk) and checks what clients see and what is
// left on the host; it also runs the shortened soak. Each test starts its
// own spaced (test/harness) on its own address range inside 10.246.0.0/16.
// The package skips itself where it cannot run (not root, no runsc, no base
// template), or fails under SPACE_TEST_STRICT=1.
package fault

import (
	"os"
	"testing"
	"time"

	"github.com/spacesandbox/space/test/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name: "fault",
		Root: "they run spaced, runsc, netns and nftables, and mount a small filesystem",
	}))
}

// ownDaemon starts a spaced for the test with this suite's settings: no
// warm pool unless o.Pool asks for one, agents that must boot within 10 s,
// two pool boots at a time, and a minute to answer /healthz, since a
// restart after kill -9 first recovers every sandbox the daemon had.
func ownDaemon(t *testing.T, o harness.Options) *harness.Daemon {
	t.Helper()
	o.NoPool = o.Pool == ""
	o.BootTimeout = 10 * time.Second
	o.StartTimeout = time.Minute
	o.Env = append(o.Env, "SPACE_POOL_BOOTS=2")
	return harness.Own(t, o)
}
