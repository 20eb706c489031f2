// Package redteam runs hostile code inside real gVisor sandboxes under a
// real spaced and checks that every attempt to escape or to harm the host,
// spaced or a neighbouring sandbox fails. Each attempt is one entry of a
// table (id, category, what it tries, the code, and the check of its
// result); docs/security.md lists every id with what stops it, and a test
// keeps the two in step. The daemon comes from test/harness; the package
// skips itself where it cannot run (not root, no runsc, no base template),
// or fails under SPACE_TEST_STRICT=1.
package redteam

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/test/harness"
)

// env is what the first test that needs it started.
var env struct {
	d      *harness.Daemon // the spaced under attack
	canary *canary
}

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name:     "redteam",
		Root:     "they run spaced, runsc, netns and nftables",
		Teardown: teardown,
	}))
}

// teardown shuts spaced down and checks, last, that the host's canaries
// survived the whole run.
func teardown() error {
	if env.d != nil {
		env.d.Shutdown()
	}
	if env.canary == nil {
		return nil
	}
	defer env.canary.remove()
	if err := env.canary.check(); err != nil {
		return fmt.Errorf("host canaries after the run: %w", err)
	}
	return nil
}

var (
	startOnce sync.Once
	startErr  error
)

// start starts spaced (building it first) and lays the host canaries. It
// runs with the first test that needs them, so that TestSecurityDoc alone
// builds and starts nothing.
func start() error {
	d, err := harness.Start(harness.Options{
		Name: "main", CIDR: "10.245.0.0/20", BootTimeout: 10 * time.Second, Pool: "base=2:4",
		Env: []string{
			"SPACE_LOG_LEVEL=info", // the attacks would flood a debug log
			// The pull attempts' positive control: a registry the
			// operator trusts (dial_test.go).
			"SPACE_REGISTRY_ALLOW=" + allowedRegistry + "/32",
		},
	})
	env.d = d
	if err != nil {
		if d != nil {
			return fmt.Errorf("start spaced: %w\n%s", err, d.LogTail(40))
		}
		return fmt.Errorf("start spaced: %w", err)
	}
	if env.canary, err = newCanary(d); err != nil {
		return fmt.Errorf("canary: %w", err)
	}
	return nil
}

// need skips t when the package cannot run, and returns the daemon, whose
// log's tail is printed if t fails.
func need(t *testing.T) *harness.Daemon {
	t.Helper()
	harness.Need(t)
	startOnce.Do(func() { startErr = start() })
	if startErr != nil {
		t.Fatalf("redteam: %v", startErr)
	}
	env.d.DumpOnFailure(t)
	return env.d
}
