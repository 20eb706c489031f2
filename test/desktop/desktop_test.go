// Package desktop_test runs the unmodified E2B Desktop SDKs (Python
// `e2b-desktop` from PyPI, JS `@e2b/desktop` from npm, both pinned) against a real spaced with real gVisor
// sandboxes of the `desktop` template (templates/desktop), which the suite
// builds once per run the way a user does (scripts/build-desktop.sh). The
// SDK is pointed at spaced only with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY. The tests check the screen's pixels, not only the commands'
// exit codes. The package skips where it cannot run (not root, no runsc, no
// base template, no python3, node or npm), or fails under
// SPACE_TEST_STRICT=1.
//
// SPACE_DESKTOP_ONLY, for working on one test, is pytest's selection
// (paths and node ids under python/, space-separated); the JS suite is
// left out then.
package desktop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// desktopCIDR is the sandbox range of the suite's spaced.
const desktopCIDR = "10.251.4.0/22"

// buildTimeout bounds the template's build: Debian's packages for the
// session and Chromium, installed in a gVisor sandbox.
const buildTimeout = 20 * time.Minute

// suiteTimeout bounds each SDK's suite.
const suiteTimeout = 10 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{Name: "desktop", Root: "they run spaced, runsc, netns and nftables"}))
}

// TestDesktopSDK builds the desktop template on a real spaced and runs the
// Python SDK's suite against it.
func TestDesktopSDK(t *testing.T) {
	testenv.NeedCommand(t, "python3", "node", "npm")
	opts := harness.Options{Name: "desktop", CIDR: desktopCIDR, NoPool: true}
	if pool := os.Getenv("SPACE_DESKTOP_POOL"); pool != "" { // for the bench's documented run
		opts.NoPool, opts.Pool = false, pool
	}
	d := harness.Own(t, opts)
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	harness.InstallSDKs(t, here)

	root := filepath.Join(here, "..", "..")
	start := time.Now()
	harness.RunHost(t, root, []string{"SPACE_ADDR=" + d.Addr, "SPACE_API_KEY=" + d.APIKey, "SPACE_CLI=" + harness.Bin(t, "space")},
		buildTimeout, "scripts/build-desktop.sh")
	t.Logf("template desktop built in %s", time.Since(start).Round(time.Millisecond))

	args := []string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"}
	only := strings.Fields(os.Getenv("SPACE_DESKTOP_ONLY"))
	if len(only) > 0 {
		args = append(args, only...)
	} else {
		args = append(args, ".")
	}
	env := append(harness.WithoutE2B(os.Environ()),
		"E2B_API_URL=http://"+d.Addr, "E2B_SANDBOX_URL=http://"+d.Addr, "E2B_API_KEY="+d.APIKey)
	env = append(env, cdpHosts(t)...)
	t.Run("python", func(t *testing.T) {
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "python"), env, suiteTimeout, filepath.Join(here, ".venv", "bin", "python"), args...)
	})
	if len(only) > 0 {
		return
	}
	t.Run("js", func(t *testing.T) {
		tests, _ := filepath.Glob(filepath.Join(here, "js", "*.test.mjs"))
		if len(tests) == 0 {
			t.Fatal("no JS tests found")
		}
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "js"), env, suiteTimeout,
			"node", append([]string{"--test", "--test-concurrency=1", "--test-force-exit"}, tests...)...)
	})
	// The host's side of a desktop, on the same spaced: one build of the
	// template serves the whole suite.
	t.Run("host", func(t *testing.T) { desktopHost(t, d) })
	t.Run("native", func(t *testing.T) { desktopNative(t, d) })
	t.Run("bench", func(t *testing.T) { desktopBench(t, d) })
	t.Run("console", func(t *testing.T) { consoleDesktop(t, d) })
}
