package desktop_test

// Item 2's last part: the URL the SDK's stream.get_url() returns opens in a
// real Chromium on the host (Debian's, headless, driven by chromedp, in a
// network namespace of its own: harness.Browser) and shows the sandbox's
// screen: noVNC's page and its WebSocket go through
// spaced's port routing to x11vnc in the sandbox.

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/test/harness"
)

// streamInfo is what python/novnc_url.py prints.
type streamInfo struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	Key string `json:"key"`
}

// viewer checks one stream in the host's Chromium: with auth, the URL
// carries the password and connects, and without it noVNC asks for one.
func viewer(t *testing.T, d *harness.Daemon, auth bool) {
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	arg := "none"
	if auth {
		arg = "auth"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(here, ".venv", "bin", "python"), "novnc_url.py", arg)
	cmd.Dir = filepath.Join(here, "python")
	cmd.Env = append(harness.WithoutE2B(os.Environ()),
		"E2B_API_URL=http://"+d.Addr, "E2B_SANDBOX_URL=http://"+d.Addr, "E2B_API_KEY="+d.APIKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("novnc_url.py: %v\n%s", err, stderr.String())
	}
	var s streamInfo
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("novnc_url.py printed %q: %v", out, err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(context.Background(), s.ID) })
	t.Logf("get_url(): %s", s.URL)

	// The SDK builds https:// (E2B's front is TLS); spaced serves plain
	// HTTP, so the viewer opens the same URL with http:// (docs/desktop.md).
	u, err := url.Parse(s.URL)
	if err != nil || u.Scheme != "https" {
		t.Fatalf("get_url() %q: %v", s.URL, err)
	}
	u.Scheme = "http"
	if auth && u.Query().Get("password") != s.Key {
		t.Fatalf("get_url(auth_key=...) does not carry the key: %s", s.URL)
	}

	b := browser(t, d)
	logs := consoleLog(b)
	failed := harness.FailedLoads(b)
	if err := chromedp.Do(b, chromedp.Navigate(u.String())); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	isConnected := func() bool {
		ok, _ := chromedp.Run(b, chromedp.Evaluate[bool](`document.documentElement.classList.contains("noVNC_connected")`))
		return ok
	}
	untilReady(t, b, "NOT CONNECTED", isConnected, failed, logs)
	before := screenshot(t, d, s.ID)
	page := shows(t, b, before, "at connect")
	// The canvas is live: a window opened in the sandbox appears in it, and
	// the screen before no longer matches (so the comparison can fail).
	sh(t, d, s.ID, "xfce4-terminal --geometry=60x12+200+200 --title=viewer-check >/dev/null 2>&1 & "+
		"for i in $(seq 100); do wmctrl -l | grep -q viewer-check && exit 0; sleep 0.2; done; exit 1")
	time.Sleep(time.Second) // not an assertion: lets the terminal draw before the screenshot
	after := screenshot(t, d, s.ID)
	page = shows(t, b, after, "with a new window")
	if miss := mismatch(before, page, viewRegion); miss < 0.02 {
		t.Errorf("the viewer matched the screen before the window opened too (%.1f%% differ): the check cannot tell", 100*miss)
	}
	if !auth {
		// A pause ends the open viewer's connection (host to spaced to the
		// sandbox); reloading the page connects to the resumed desktop.
		ctx := harness.Ctx(t, 3*time.Minute)
		if _, err := d.Client.PauseSandbox(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Client.ResumeSandbox(ctx, s.ID, 600); err != nil {
			t.Fatal(err)
		}
		connected, _ := chromedp.Run(b, chromedp.Evaluate[bool](`document.documentElement.classList.contains("noVNC_connected")`))
		status, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.getElementById("noVNC_status").textContent`))
		t.Logf("the open viewer after pause and resume: connected %v, status %q", connected, status)
		if err := chromedp.Do(b, chromedp.Reload()); err != nil {
			t.Fatalf("reload: %v", err)
		}
		if !harness.WaitFor(60*time.Second, func() bool {
			ok, _ := chromedp.Run(b, chromedp.Evaluate[bool](`document.documentElement.classList.contains("noVNC_connected")`))
			return ok
		}) {
			t.Fatalf("the reloaded viewer never connected after the resume; the page's console:\n%s", strings.Join(logs(), "\n"))
		}
		page = shows(t, b, screenshot(t, d, s.ID), "reloaded after the resume")

		// SPACE_SCREENSHOTS=$PWD/docs/img keeps the viewer's screenshot
		// (docs/img/desktop-novnc.png), as test/console does its pages.
		if dir := os.Getenv("SPACE_SCREENSHOTS"); dir != "" {
			savePNG(t, page, filepath.Join(dir, "desktop-novnc.png"))
		}
		return
	}

	// The same URL without the password: noVNC asks for it and shows
	// nothing of the screen.
	q := u.Query()
	q.Del("password")
	u.RawQuery = q.Encode()
	b2 := browser(t, d)
	logs2 := consoleLog(b2)
	failed2 := harness.FailedLoads(b2)
	if err := chromedp.Do(b2, chromedp.Navigate(u.String())); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	asks := func() bool {
		ok, _ := chromedp.Run(b2, chromedp.Evaluate[bool](`document.getElementById("noVNC_credentials_dlg").classList.contains("noVNC_open")`))
		return ok
	}
	untilReady(t, b2, "NO PASSWORD DIALOG", asks, failed2, logs2)
	if ok, _ := chromedp.Run(b2, chromedp.Evaluate[bool](`document.documentElement.classList.contains("noVNC_connected")`)); ok {
		t.Error("without the password noVNC connected")
	}
}

// shows waits for the viewer's page to show want (the sandbox's own
// screenshot) in viewRegion and returns the page's screenshot; it fails t
// when it never does, saving both images in the suite's kept directory.
func shows(t *testing.T, b context.Context, want image.Image, when string) image.Image {
	t.Helper()
	var page image.Image
	miss := 1.0
	// Frames arrive after the connect or the change: a bounded wait.
	harness.WaitFor(60*time.Second, func() bool {
		raw, err := chromedp.Run(b, chromedp.CaptureScreenshot())
		if err != nil {
			return false
		}
		if page, err = png.Decode(bytes.NewReader(raw)); err != nil {
			return false
		}
		miss = mismatch(want, page, viewRegion)
		return miss < 0.02
	})
	if page == nil {
		t.Fatalf("%s: no screenshot of the viewer", when)
	}
	if miss >= 0.02 {
		dir := harness.Tmp()
		savePNG(t, want, filepath.Join(dir, "viewer-want.png"))
		savePNG(t, page, filepath.Join(dir, "viewer-page.png"))
		t.Fatalf("%s: the viewer's canvas does not show the screen: %.1f%% of the region's blocks differ (both images in %s)", when, 100*miss, dir)
	}
	return page
}

// untilReady waits up to a minute for the viewer's page to be ready, and
// fails t with the page's state, its failed loads and its console when it
// is not. The browser has a network namespace of its own
// (harness.Browser), so the host's address changes (a sandbox started or
// ended, by any suite) do not abort its loads: a load that fails is a
// failure.
func untilReady(t *testing.T, b context.Context, what string, ready func() bool, failed, logs func() []string) {
	t.Helper()
	if !harness.WaitFor(60*time.Second, ready) {
		t.Fatalf("%s: %s; failed loads: %q; the page's console:\n%s", what, pageState(b), failed(), strings.Join(logs(), "\n"))
	}
}

// pageState describes the viewer's page for a failure's message: its
// address, title, noVNC's state classes and status line, and the start of
// its text.
func pageState(b context.Context) string {
	st, err := chromedp.Run(b, chromedp.Evaluate[string](`[document.readyState, location.href, document.title,
		document.documentElement.className,
		(document.getElementById("noVNC_status") || {}).textContent,
		(document.body ? document.body.innerText : "").slice(0, 300)].join(" | ")`))
	if err != nil {
		return "page unreadable: " + err.Error()
	}
	return st
}

// viewRegion is compared between the sandbox's screenshot and the viewer's
// page: the desktop below the panel and right of noVNC's control-bar
// handle. The viewport is the screen's size, and resize=scale leaves a
// 1024x768 screen unscaled at the page's origin.
var viewRegion = image.Rect(24, 40, 1024, 760)

// block is the side of the squares mismatch compares: VNC's lossy
// encodings (tight's JPEG, noVNC's default quality) blur single pixels
// and thin lines, but not a square's mean colour.
const block = 8

// mismatch is the share of region's blocks whose mean colour differs by
// more than a small amount on some channel between a and b.
func mismatch(a, b image.Image, region image.Rectangle) float64 {
	if !region.In(a.Bounds()) || !region.In(b.Bounds()) {
		return 1
	}
	bad, all := 0, 0
	for y := region.Min.Y; y+block <= region.Max.Y; y += block {
		for x := region.Min.X; x+block <= region.Max.X; x += block {
			sq := image.Rect(x, y, x+block, y+block)
			ma, mb := mean(a, sq), mean(b, sq)
			for c := range ma {
				if d := ma[c] - mb[c]; d > 12 || d < -12 {
					bad++
					break
				}
			}
			all++
		}
	}
	return float64(bad) / float64(all)
}

// mean is r's mean colour in img, 0-255 a channel.
func mean(img image.Image, r image.Rectangle) [3]int {
	var sum [3]uint32
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			sum[0], sum[1], sum[2] = sum[0]+cr>>8, sum[1]+cg>>8, sum[2]+cb>>8
		}
	}
	n := uint32(r.Dx() * r.Dy())
	return [3]int{int(sum[0] / n), int(sum[1] / n), int(sum[2] / n)}
}

// browser starts a headless Chromium of t's own, in a network namespace
// of its own that reaches d, with a viewport of the desktop's size, for at
// most 3 minutes.
func browser(t *testing.T, d *harness.Daemon) context.Context {
	t.Helper()
	return browserFor(t, d, 3*time.Minute)
}

// browserFor is browser for at most limit.
func browserFor(t *testing.T, d *harness.Daemon, limit time.Duration) context.Context {
	t.Helper()
	return harness.Browser(t, harness.BrowserOptions{Width: 1024, Height: 768, Limit: limit, Reach: []string{d.Addr}})
}

// consoleLog collects the page's console messages and exceptions, for a
// failure's message.
func consoleLog(ctx context.Context) func() []string {
	var mu sync.Mutex
	var lines []string
	add := func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() }
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ConsoleAPICalled) {
			if err != nil {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			add(string(ev.Type) + ": " + strings.Join(parts, " "))
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, runtime.ExceptionThrown) {
			if err != nil {
				return
			}
			e := ev.ExceptionDetails
			msg := e.Text
			if e.Exception != nil {
				msg += " " + e.Exception.Description
			}
			add("exception: " + msg)
		}
	}()
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), lines...) }
}

func savePNG(t *testing.T, img image.Image, path string) {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
