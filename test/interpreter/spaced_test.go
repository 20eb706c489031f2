package interpreter_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name: "interpreter",
		Root: "they run spaced, runsc, netns and nftables",
	}))
}

// TestSDKsThroughSpaced runs the same SDK suites against a real spaced:
// the code-interpreter-v1 template is built there the way a user builds
// it (scripts/build-code-interpreter.sh, offline from the wheelhouse),
// Sandbox.create() restores its kernel already running (checked first, in
// warm_test.go), and every call
// goes through spaced's E2B proxy to port 49999 in the sandbox. Its
// native subtest drives spaced's own code API (native_test.go) on the
// same daemon, so that the template is built once per run; its bench
// subtest runs `space bench --templates --quick` there, the one run of the
// bench's code-interpreter figures in the tests.
func TestSDKsThroughSpaced(t *testing.T) {
	testenv.NeedCommand(t, "python3", "node", "npm")
	d := harness.Own(t, harness.Options{Name: "spaced", CIDR: "10.248.0.0/22", NoPool: true, BootTimeout: 10 * time.Second})
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	harness.InstallSDKs(t, here)
	root := filepath.Join(here, "..", "..")
	build := []string{
		"SPACE_ADDR=" + d.Addr, "SPACE_API_KEY=" + d.APIKey, "SPACE_CLI=" + harness.Bin(t, "space"),
		"SPACE_WHEELHOUSE=" + filepath.Join(interpretertest.CacheDir(), "wheels"),
	}
	start := time.Now()
	runEnv(t, root, build, "scripts/build-code-interpreter.sh")
	t.Logf("code-interpreter-v1 built in %s", time.Since(start).Round(time.Millisecond))

	t.Run("kernel running at create", func(t *testing.T) { kernelWarmAtCreate(t, d) })
	// spaced's own code API, on the same daemon and template.
	t.Run("native", func(t *testing.T) { nativeAPI(t, d) })
	// Output floods and memory, in a sandbox of their own (issue 27).
	t.Run("output flood", func(t *testing.T) { outputFlood(t, d) })
	t.Run("sandbox full", func(t *testing.T) { sandboxFull(t, d) })

	env := append(harness.WithoutE2B(os.Environ()),
		"E2B_API_URL=http://"+d.Addr, "E2B_SANDBOX_URL=http://"+d.Addr, "E2B_API_KEY="+d.APIKey)
	t.Run("python", func(t *testing.T) {
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "python"), env, suiteTimeout,
			filepath.Join(here, ".venv", "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", ".")
	})
	t.Run("js", func(t *testing.T) {
		tests, _ := filepath.Glob(filepath.Join(here, "js", "*.test.mjs"))
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "js"), env, suiteTimeout,
			"node", append([]string{"--test", "--test-concurrency=1", "--test-force-exit"}, tests...)...)
	})
	// Last: it builds templates of its own on d.
	t.Run("bench", func(t *testing.T) { benchQuick(t, d) })
}
