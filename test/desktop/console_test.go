package desktop_test

// Item 5: the web console's Desktop tab, in the host's Chromium (chromedp):
// signed in with the console's session (no key or token in a URL), the
// tab shows the sandbox's screen live through the API's VNC WebSocket,
// view-only until "Take control", and a screenshot through the native API.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// belowPanel is the screen without Xfce's panel (its clock moves).
var belowPanel = image.Rect(0, 40, 1024, 760)

func consoleDesktop(t *testing.T, d *harness.Daemon) {
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "desktop", TimeoutSeconds: 900})
	base := d.NewSandbox(t, client.CreateSandboxRequest{Template: "base", TimeoutSeconds: 300})
	// Several bounded waits of a loaded machine in one page: more than
	// browser's 3 minutes.
	b := browserFor(t, d, 10*time.Minute)
	logs := consoleLog(b)
	urls := requestedURLs(b)
	ui := "http://" + d.Addr + "/ui/"
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(b, actions...); err != nil {
			t.Fatalf("%s: %v; the page's console:\n%s", what, err, strings.Join(logs(), "\n"))
		}
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(b, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	waitJS := func(what, js string) {
		t.Helper()
		if !harness.WaitFor(90*time.Second, func() bool {
			ok, _ := chromedp.Run(b, chromedp.Evaluate[bool](js))
			return ok
		}) {
			pageShot(t, b, "console-"+strings.ReplaceAll(what, " ", "-")+".png")
			t.Fatalf("%s: not within 90 s; the page's console:\n%s", what, strings.Join(logs(), "\n"))
		}
	}
	run("sign in", chromedp.Navigate(ui),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=key]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=key]`), d.APIKey),
		chromedp.Click(chromedp.CSS(`[data-testid=signin]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signout]`)))

	// A sandbox without a display has no Desktop tab (the control of the
	// tab's test below).
	// The console is one page: a sandbox's page is a change of the URL's
	// fragment, made by the page's own script (a Navigate to it would wait
	// for a load that a fragment change does not make).
	open := func(what, id string) {
		t.Helper()
		eval(`location.hash = "#/sandboxes/` + id + `/overview"`)
		waitJS(what, `!!document.querySelector("[data-testid=tab-terminal]") && location.hash.includes("`+id+`")`)
	}
	open("open the base sandbox", base.ID)
	time.Sleep(2 * time.Second) // not an assertion: the page's probe answers
	if n := eval(`String(document.querySelectorAll("[data-testid=tab-desktop]").length)`); n != "0" {
		t.Errorf("the base sandbox's page has a Desktop tab")
	}

	open("open the desktop sandbox", sb.ID)
	waitJS("the Desktop tab shows", `!!document.querySelector("[data-testid=tab-desktop]")`)
	chromedp.Run(b, chromedp.Evaluate[bool](`window.cspViolations = []; document.addEventListener("securitypolicyviolation", e => cspViolations.push(e.violatedDirective + " " + e.blockedURI)); true`))
	run("open the Desktop tab", chromedp.Click(chromedp.CSS(`[data-testid=tab-desktop]`)))
	waitJS("the viewer connects", `document.querySelector("[data-testid=desktop-status]")?.textContent === "connected"`)

	ctx := harness.Ctx(t, 5*time.Minute)
	native := func() image.Image {
		t.Helper()
		raw, err := d.Client.DesktopScreenshot(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	// canvas is the viewer's framebuffer, read from the page at the
	// screen's own size (the page shows it scaled to its box).
	canvas := func() image.Image {
		url, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector("[data-testid=desktop-screen] canvas").toDataURL("image/png")`))
		if err != nil {
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(url, "data:image/png;base64,"))
		if err != nil {
			return nil
		}
		img, _ := png.Decode(bytes.NewReader(raw))
		return img
	}
	// shows waits for the canvas to show want below the panel.
	shows := func(want image.Image, when string) image.Image {
		t.Helper()
		var got image.Image
		miss := 1.0
		harness.WaitFor(60*time.Second, func() bool {
			if got = canvas(); got == nil {
				return false
			}
			miss = mismatch(want, got, belowPanel)
			return miss < 0.02
		})
		if miss >= 0.02 {
			dir := harness.Tmp()
			savePNG(t, want, filepath.Join(dir, "console-want.png"))
			if got != nil {
				savePNG(t, got, filepath.Join(dir, "console-canvas.png"))
			}
			pageShot(t, b, "console-page.png")
			t.Fatalf("%s: the canvas does not show the screen: %.1f%% of its blocks differ (images in %s)", when, 100*miss, dir)
		}
		return got
	}

	before := native()
	got := shows(before, "at connect")
	if b := got.Bounds(); b.Dx() != 1024 || b.Dy() != 768 {
		t.Errorf("the canvas is %v, want the screen's 1024x768", b)
	}
	if n := colours(got, belowPanel); n < 8 {
		t.Errorf("the canvas has %d colours: blank", n)
	}
	pageShot(t, b, "console-desktop.png")

	// View-only: the page's pointer over the canvas does not move the
	// sandbox's.
	moveTo := func(fx, fy float64) {
		t.Helper()
		js := fmt.Sprintf(`(() => { const r = document.querySelector("[data-testid=desktop-screen] canvas").getBoundingClientRect(); return [r.left + r.width*%g, r.top + r.height*%g]; })()`, fx, fy)
		xy, err := chromedp.Run(b, chromedp.Evaluate[[]float64](js))
		if err != nil || len(xy) != 2 {
			t.Fatalf("canvas position: %v %v", xy, err)
		}
		run("move the page's pointer", chromedp.MouseEvent("mouseMoved", xy[0]-5, xy[1]-5), chromedp.MouseEvent("mouseMoved", xy[0], xy[1]))
	}
	cursor := func() (int, int) {
		t.Helper()
		res, err := d.Client.DesktopAct(ctx, sb.ID, client.DesktopAction{Action: "cursor_position"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Cursor.X, res.Cursor.Y
	}
	if _, err := d.Client.DesktopAct(ctx, sb.ID, client.DesktopAction{Action: "mouse_move", Coordinate: []int{900, 700}}); err != nil {
		t.Fatal(err)
	}
	moveTo(0.25, 0.25)
	time.Sleep(time.Second) // not an assertion: time for a move to arrive, if one were sent
	if x, y := cursor(); x != 900 || y != 700 {
		t.Errorf("view-only: the page's pointer moved the sandbox's to %d,%d", x, y)
	}

	// An action through the native API changes the canvas: xfdesktop's
	// menu at a right click on the background.
	if _, err := d.Client.DesktopAct(ctx, sb.ID, client.DesktopAction{Action: "right_click", Coordinate: []int{300, 300}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // not an assertion: the menu draws
	menu := native()
	if miss := mismatch(before, menu, belowPanel); miss < 0.02 {
		t.Fatalf("the right click changed only %.1f%% of the screen: the check cannot tell", 100*miss)
	}
	got = shows(menu, "with the menu open")
	if miss := mismatch(before, got, belowPanel); miss < 0.02 {
		t.Errorf("the canvas with the menu open still matches the screen before it (%.1f%% differ)", 100*miss)
	}
	pageShot(t, b, "console-desktop-menu.png")
	if dir := os.Getenv("SPACE_SCREENSHOTS"); dir != "" {
		shotTo(t, b, filepath.Join(dir, "desktop.png"))
	}
	text := "Escape"
	if _, err := d.Client.DesktopAct(ctx, sb.ID, client.DesktopAction{Action: "key", Text: &text}); err != nil {
		t.Fatal(err)
	}

	// Take control: now the page's pointer moves the sandbox's, to the
	// same place on the screen.
	run("take control", chromedp.Click(chromedp.CSS(`[data-testid=desktop-control]`)))
	waitJS("control taken", `document.querySelector("[data-testid=desktop-screen]").dataset.viewOnly === "false"`)
	moveTo(0.5, 0.5)
	var x, y int
	if !harness.WaitFor(20*time.Second, func() bool {
		x, y = cursor()
		return x > 500 && x < 524 && y > 372 && y < 396
	}) {
		t.Errorf("in control: the page's pointer at the canvas's middle put the sandbox's at %d,%d, want about 512,384", x, y)
	}

	// The screenshot button: the native API's PNG, shown in the page.
	run("screenshot", chromedp.Click(chromedp.CSS(`[data-testid=desktop-screenshot]`)))
	waitJS("the screenshot shows", `(() => { const i = document.querySelector("[data-testid=desktop-shot] img"); return !!i && i.complete && i.naturalWidth === 1024 && i.naturalHeight === 768 })()`)

	if v := eval(`JSON.stringify(cspViolations)`); v != "[]" {
		t.Errorf("the page broke its Content-Security-Policy: %s", v)
	}
	for _, u := range urls() {
		if strings.Contains(u, d.APIKey) {
			t.Errorf("the API key is in a URL the browser asked for: %s", u)
		}
		if sb.AccessToken != "" && strings.Contains(u, sb.AccessToken) {
			t.Errorf("the sandbox's access token is in a URL the browser asked for: %s", u)
		}
	}
}

// requestedURLs records every URL the browser asks for (WebSockets too).
func requestedURLs(ctx context.Context) func() []string {
	var mu sync.Mutex
	var urls []string
	add := func(u string) { mu.Lock(); urls = append(urls, u); mu.Unlock() }
	go func() {
		for ev, err := range chromedp.Events(ctx, network.RequestWillBeSent) {
			if err != nil {
				return
			}
			add(ev.Request.URL)
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, network.WebSocketCreated) {
			if err != nil {
				return
			}
			add(ev.URL)
		}
	}()
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), urls...) }
}

// pageShot keeps a screenshot of the page in the suite's kept directory.
func pageShot(t *testing.T, b context.Context, name string) {
	shotTo(t, b, filepath.Join(harness.Tmp(), name))
}

func shotTo(t *testing.T, b context.Context, path string) {
	raw, err := chromedp.Run(b, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot of the page: %v", err)
		return
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Logf("screenshot of the page: %v", err)
	}
}
