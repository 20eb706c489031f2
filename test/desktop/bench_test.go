package desktop_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// desktopBench proves `space bench --desktop` works on the suite's spaced
// and its one build of the template, with the E2B Desktop SDK's figures
// and the raw runsc anchor; it asserts no speed (docs/benchmarks.md has
// the figures). The suite's spaced has no warm pool unless
// SPACE_DESKTOP_POOL gives one (e.g. desktop=1:1, for the documented
// run), so its create figure is of a create without one; and it runs
// the bench's small counts unless SPACE_DESKTOP_BENCH_FULL is set.
func desktopBench(t *testing.T, d *harness.Daemon) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--desktop", "--e2b", filepath.Join(here, ".venv", "bin", "python"),
		"--runsc", testenv.Runsc(), "--templates-dir", testenv.TemplatesDir()}
	if os.Getenv("SPACE_DESKTOP_BENCH_FULL") == "" {
		args = append(args, "--quick")
	}
	var res map[string]any
	d.Bench(t, &res, args...)
	for _, k := range []string{"create_to_screenshot_p50", "sdk_create_to_screenshot_p50", "screenshot_p50", "click_p50", "click_back_to_back_p50",
		"command_screenshot_p50", "command_click_p50", "sdk_screenshot_p50", "sdk_click_p50", "click_with_screenshot_p50",
		"vnc_first_ms", "vnc_handshake_p50", "idle_mib", "chromium_mib", "pause_p50", "resume_p50", "resume_to_screenshot_p50", "raw_checkpoint_p50", "raw_restore_p50"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Errorf("figure %s = %v (missing or not positive)", k, v)
		}
	}
	if pooled := os.Getenv("SPACE_DESKTOP_POOL") != ""; res["pooled"] != pooled {
		t.Errorf("pooled = %v, want %v", res["pooled"], pooled)
	}
}
