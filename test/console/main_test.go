// Package console drives the web console (/ui/) of a real spaced, with real
// gVisor sandboxes, in Debian's Chromium through chromedp: sign-in, the
// live list, the terminal, files, a sandbox's metrics charts and log, kill,
// and what must be refused (a wrong key, a cross-site POST). Screenshots of
// each page are saved as the tests' output (SPACE_SCREENSHOTS names the
// directory; docs/console/ holds the current ones). A missing chromium
// skips the suite, or fails it under SPACE_TEST_STRICT=1.
package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// consoleCIDR is the sandbox range of this suite's spaced (10.249.0.0/22 is
// no other suite's).
const consoleCIDR = "10.249.0.0/22"

var (
	shared   *harness.Daemon
	chromium string // why chromium cannot run, or ""
)

func TestMain(m *testing.M) {
	chromium = testenv.CheckCommand("chromium")
	if testenv.Unavailable("console", chromium) {
		os.Exit(1)
	}
	os.Exit(harness.Main(m, harness.Suite{
		Name: "console",
		Root: "they run spaced, runsc, netns and nftables",
		Setup: func() error {
			// Sampling every second lets the charts fill in seconds.
			d, err := harness.Start(harness.Options{Name: "main", CIDR: consoleCIDR, Pool: "base=1:2", BootTimeout: 10 * time.Second,
				Env: []string{"SPACE_METRICS_INTERVAL=1s"}})
			shared = d
			if err != nil && d != nil {
				return fmt.Errorf("start spaced: %w\n%s", err, d.LogTail(40))
			}
			return err
		},
		Teardown: func() error {
			if shared != nil {
				return shared.Shutdown()
			}
			return nil
		},
	}))
}

// need skips (strict: fails) t when the suite cannot run, and returns the
// shared daemon, whose log's tail is printed if t fails.
func need(t *testing.T) *harness.Daemon {
	t.Helper()
	harness.Need(t)
	if chromium != "" {
		testenv.Skip(t, chromium)
	}
	shared.DumpOnFailure(t)
	return shared
}

// browser starts a headless Chromium of t's own (a fresh profile: no
// cookies), in a network namespace of its own (harness.Browser) that
// reaches the suite's spaced and the addresses in reach, and returns a
// context for it.
func browser(t *testing.T, reach ...string) context.Context {
	t.Helper()
	return harness.Browser(t, harness.BrowserOptions{Width: 1400, Height: 900, Limit: 2 * time.Minute,
		Reach: append([]string{shared.Addr}, reach...)})
}

// screenshotDir is where screenshots go: SPACE_SCREENSHOTS, else a
// directory under the system's temp dir that outlives the run.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("SPACE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "space-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the viewport as name.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	// Let the page settle (fonts, a chart's first frame).
	chromedp.Do(ctx, chromedp.Sleep(300*time.Millisecond))
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	saveScreenshot(t, name, buf)
}

// screenshotPage saves the whole page, down to its end, as name.png: the
// viewport grows to the page's height for the shot, then is as it was.
func screenshotPage(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	w, h := eval[int](t, ctx, `window.innerWidth`), eval[int](t, ctx, `window.innerHeight`)
	full := eval[int](t, ctx, `document.documentElement.scrollHeight`)
	do(t, ctx, "grow the viewport to the page", chromedp.EmulateViewport(int64(w), int64(max(full, h))))
	screenshot(t, ctx, name)
	do(t, ctx, "restore the viewport", chromedp.EmulateViewport(int64(w), int64(h)))
}

func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	path := filepath.Join(screenshotDir(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// do runs actions, failing t with what was being done.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls a JavaScript predicate until it is truthy.
func waitFor(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, body)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}
