// Package e2b_test runs the unmodified E2B SDKs (Python from PyPI, JS from
// npm, both pinned) against a real spaced with real gVisor sandboxes. The
// SDKs are pointed at spaced only with E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY and (for volume content) E2B_VOLUME_API_URL, as a user would. The daemon comes from test/harness; the
// package skips where it cannot run (not root, no runsc, no base template,
// no python3, node or npm), or fails under SPACE_TEST_STRICT=1. The SDKs
// are installed by install-sdks.sh when missing.
//
// SPACE_E2B_ONLY, for working on one test, names the test files to run
// (paths under test/e2b, space-separated, e.g. "python/test_stress.py
// js/lifecycle.test.mjs"); the other files and the bench are left out.
package e2b_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// suiteTimeout bounds one SDK's suite (the Python one takes about four
// minutes on a loaded machine).
const suiteTimeout = 6 * time.Minute

// e2bCIDR is the sandbox range of the suite's spaced.
const e2bCIDR = "10.242.0.0/20"

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{Name: "e2b", Root: "they run spaced, runsc, netns and nftables"}))
}

func TestE2BSDKs(t *testing.T) {
	harness.Need(t)
	testenv.NeedCommand(t, "python3", "node", "npm")
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(here, ".venv", ".installed")) || !exists(filepath.Join(here, "js", "node_modules", ".installed")) {
		harness.InstallSDKs(t, here)
	}

	// The API key is "e2b_" and 40 hex digits, the shape every SDK accepts.
	// Volumes of 64 MB, so the SDK tests reach a volume's size limit fast;
	// sandbox metrics every second, not 5 (test_telemetry.py, telemetry.test.mjs).
	d, err := harness.Start(harness.Options{Name: "sdk", CIDR: e2bCIDR, Env: []string{"SPACE_VOLUME_DEFAULT_MB=64", "SPACE_METRICS_INTERVAL=1s",
		// The webhook tests' receivers listen on 127.0.0.1 (test_webhooks.py).
		"SPACE_WEBHOOK_ALLOW=127.0.0.1/32"}})
	if d != nil {
		started := err == nil
		t.Cleanup(func() {
			if err := d.Shutdown(); err != nil && started {
				t.Error(err)
			}
		})
	}
	if err != nil {
		if d != nil {
			t.Log(d.LogTail(40))
		}
		t.Fatalf("start spaced: %v", err)
	}

	sdkEnv := append(harness.WithoutE2B(os.Environ()),
		"E2B_API_URL=http://"+d.Addr,
		"E2B_SANDBOX_URL=http://"+d.Addr,
		"E2B_API_KEY="+d.APIKey,
		// The volume content API's address (the SDKs' default is
		// https://api.<domain>).
		"E2B_VOLUME_API_URL=http://"+d.Addr,
		// runsc and the daemon's runsc root, for the tests that freeze a
		// sandbox to make its agent stuck (test_stress.py, lifecycle.test.mjs).
		"SPACE_TEST_RUNSC="+testenv.Runsc(),
		"SPACE_TEST_RUNSC_ROOT="+filepath.Join(d.DataDir, "runsc"),
	)
	pyTests, jsTests := []string{"."}, []string(nil)
	if only := strings.Fields(os.Getenv("SPACE_E2B_ONLY")); len(only) > 0 {
		t.Logf("SPACE_E2B_ONLY: running only %v", only)
		pyTests = nil
		for _, f := range only {
			if rest, ok := strings.CutPrefix(f, "python/"); ok {
				pyTests = append(pyTests, rest)
			} else {
				jsTests = append(jsTests, filepath.Join(here, f))
			}
		}
	} else {
		jsTests, _ = filepath.Glob(filepath.Join(here, "js", "*.test.mjs"))
		if len(jsTests) == 0 {
			t.Fatal("no JS tests found")
		}
	}
	if len(pyTests) > 0 {
		t.Run("python", func(t *testing.T) {
			harness.SDKSuite(t, d.Tail, filepath.Join(here, "python"), sdkEnv, suiteTimeout, filepath.Join(here, ".venv", "bin", "python"),
				append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, pyTests...)...)
		})
	}
	if len(jsTests) == 0 {
		return
	}
	t.Run("js", func(t *testing.T) {
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "js"), sdkEnv, suiteTimeout,
			"node", append([]string{"--test", "--test-concurrency=4", "--test-force-exit"}, jsTests...)...)
	})
	if os.Getenv("SPACE_E2B_ONLY") != "" {
		return
	}
	// space bench --e2b works (issue 17's SDK figure; no speed asserted).
	t.Run("bench", func(t *testing.T) {
		cmd := exec.Command(harness.Bin(t, "space"), "bench", "--e2b", filepath.Join(here, ".venv", "bin", "python"), "--quick", "--json", "--settle", "0")
		cmd.Env = append(harness.WithoutE2B(os.Environ()), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("space bench --e2b: %v\n%s", err, stderr.String())
		}
		t.Logf("bench: %s", out)
		var res map[string]float64
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("bench output is not one JSON object: %v: %s", err, out)
		}
		for _, k := range []string{"sdk_create_p50_ms", "sdk_run_p50_ms", "sdk_total_p50_ms", "native_total_p50_ms", "sdk_over_native"} {
			if v, ok := res[k]; !ok || v <= 0 {
				t.Errorf("figure %s = %v (missing or not positive)", k, v)
			}
		}
	})
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
