// Package e2e runs the real spaced, with real gVisor sandboxes and the real
// in-sandbox agent, and checks what a user of the public API sees and what
// is left on the host. Nothing here is faked. The daemons come from
// test/harness; the package skips itself where it cannot run (not root, no
// runsc, no base template), or fails under SPACE_TEST_STRICT=1.
package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spacesandbox/space/test/harness"
)

// shared is the daemon of the tests that do not restart theirs.
var shared *harness.Daemon

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name: "e2e",
		Root: "they run spaced, runsc, netns and nftables",
		Setup: func() error {
			d, err := harness.Start(withDefaults(harness.Options{Name: "main", CIDR: "10.241.0.0/20",
				// Sandbox metrics every second, not 5 (TestSandboxTelemetry).
				Env: []string{"SPACE_METRICS_INTERVAL=1s"}}))
			shared = d
			if err != nil && d != nil {
				return fmt.Errorf("start spaced: %w\n%s", err, d.LogTail(40))
			}
			return err
		},
		Teardown: func() error {
			if shared != nil {
				if err := shared.Shutdown(); err != nil {
					fmt.Fprintln(os.Stderr, "e2e:", err)
				}
			}
			return nil
		},
	}))
}

// need skips t when the package cannot run, and returns the shared daemon,
// whose log's tail is printed if t fails.
func need(t *testing.T) *harness.Daemon {
	t.Helper()
	harness.Need(t)
	shared.DumpOnFailure(t)
	return shared
}

// ownDaemon starts a daemon of the test's own (on its own address range
// inside 10.241.0.0/16), for tests that kill or restart it, or configure it
// differently. It is shut down when the test ends.
func ownDaemon(t *testing.T, o harness.Options) *harness.Daemon {
	t.Helper()
	return harness.Own(t, withDefaults(o))
}

// withDefaults gives the suite's daemons a 5 s agent boot timeout (spaced's
// default is 15 s): an agent that does not come up fails a test quickly.
func withDefaults(o harness.Options) harness.Options {
	if o.BootTimeout == 0 {
		o.BootTimeout = 5 * time.Second
	}
	return o
}
