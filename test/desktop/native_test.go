package desktop_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// desktopNative drives the desktop template through the native
// computer-use API (/v1/sandboxes/{id}/desktop/...), served by
// space-desktop inside the sandbox, and checks what it does on the real
// screen: the screenshot's size, the cursor, a typed text (saved by a key
// chord and read back from the file), a click and a scroll that change the
// pixels where they should, bad input refused with nothing done, a
// sandbox without a desktop, and the CLI. It logs the native calls' times
// beside the same through xdotool and scrot commands (no assertion on
// them: the machine is shared). It runs on the suite's spaced, which has the desktop template built
// (TestDesktopSDK/native): the suite builds the template once.
func desktopNative(t *testing.T, d *harness.Daemon) {
	ctx := context.Background()
	c := d.Client
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "desktop", TimeoutSeconds: 1800})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID

	t.Run("screenshot", func(t *testing.T) {
		img := shot(t, c, id, 0)
		if b := img.Bounds(); b.Dx() != 1024 || b.Dy() != 768 {
			t.Fatalf("screenshot is %dx%d, the screen 1024x768", b.Dx(), b.Dy())
		}
		// Not a blank frame: the desktop draws more than one colour.
		if n := colours(img, img.Bounds()); n < 10 {
			t.Fatalf("screenshot has %d colours: not the desktop", n)
		}
		small := shot(t, c, id, 512)
		if b := small.Bounds(); b.Dx() != 512 || b.Dy() != 384 {
			t.Fatalf("width=512 gave %dx%d, want 512x384", b.Dx(), b.Dy())
		}
	})

	t.Run("zoom", func(t *testing.T) {
		// The panel's left end (its menu), at the screen's own pixels: the
		// same as that part of a whole screenshot (taken again should the
		// panel have changed in between).
		region := image.Rect(0, 0, 300, 28)
		var same bool
		var zoomed image.Image
		for try := 0; try < 5 && !same; try++ {
			res := act(t, c, id, client.DesktopAction{Action: "zoom", Region: []int{0, 0, 300, 28}})
			if res.Screen.Width != 1024 || res.Screen.Height != 768 {
				t.Fatalf("zoom answered the screen as %+v", res.Screen)
			}
			zoomed = decode(t, res.Screenshot)
			if b := zoomed.Bounds(); b != image.Rect(0, 0, 300, 28) {
				t.Fatalf("zoom of [0 0 300 28] is %v", b)
			}
			same = samePixels(zoomed, shot(t, c, id, 0), region)
		}
		if !same {
			t.Fatal("zoom's pixels differ from the same region of a screenshot, five times")
		}
		if n := colours(zoomed, zoomed.Bounds()); n < 3 {
			t.Fatalf("zoom of the panel has %d colours", n)
		}
	})

	t.Run("cursor", func(t *testing.T) {
		res := act(t, c, id, client.DesktopAction{Action: "mouse_move", Coordinate: []int{321, 456}})
		if res.Cursor.X != 321 || res.Cursor.Y != 456 || res.Screen.Width != 1024 || res.Screen.Height != 768 {
			t.Fatalf("mouse_move [321 456] answered %+v", res)
		}
		res = act(t, c, id, client.DesktopAction{Action: "cursor_position"})
		if res.Cursor.X != 321 || res.Cursor.Y != 456 {
			t.Fatalf("cursor_position after the move: %+v", res.Cursor)
		}
		// The X server's own word, through xdotool in the sandbox.
		if out := shIn(t, c, id, "xdotool getmouselocation"); !strings.HasPrefix(out, "x:321 y:456 ") {
			t.Fatalf("xdotool getmouselocation: %q", out)
		}
	})

	t.Run("click", func(t *testing.T) {
		// A right click on the desktop's background opens xfdesktop's menu
		// at the pointer: the screen changes below and right of it, and
		// not far above or left of it.
		at := image.Pt(500, 200)
		act(t, c, id, client.DesktopAction{Action: "mouse_move", Coordinate: []int{900, 700}})
		before := shot(t, c, id, 0)
		res := act(t, c, id, client.DesktopAction{Action: "right_click", Coordinate: []int{at.X, at.Y}, Screenshot: true})
		menu := image.Rect(at.X, at.Y, at.X+120, at.Y+120)
		// The action's screenshot is taken 150 ms after the X server took
		// the click; on a loaded host xfdesktop may draw its menu later.
		after := decode(t, res.Screenshot)
		for deadline := time.Now().Add(30 * time.Second); changed(before, after, menu) < 500 && time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
			after = shot(t, c, id, 0)
		}
		if n := changed(before, after, menu); n < 500 {
			t.Fatalf("right click at %v: %d pixels changed in %v, the menu did not open there", at, n, menu)
		}
		away := image.Rect(0, at.Y+10, at.X-150, 700)
		if n := changed(before, after, away); n > 0 {
			t.Errorf("right click at %v changed %d pixels in %v, away from it", at, n, away)
		}
		act(t, c, id, client.DesktopAction{Action: "key", Text: ptr("Escape")})
		n := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			if n = changed(before, shot(t, c, id, 0), menu); n <= 50 {
				break
			}
		}
		if n > 50 {
			t.Errorf("Escape left %d pixels changed where the menu was", n)
		}
	})

	t.Run("type", func(t *testing.T) {
		const file = "/home/user/native.txt"
		shIn(t, c, id, ": > "+file+" && (setsid mousepad "+file+" >/dev/null 2>&1 &)")
		win := waitWindow(t, c, id, "mousepad")
		// Into the text area (below the menu and tool bars), then type.
		act(t, c, id, client.DesktopAction{Action: "left_click", Coordinate: []int{win.Min.X + win.Dx()/2, win.Min.Y + win.Dy()/2}})
		before := shot(t, c, id, 0)
		text := "Hello, World! 42 <x> ~_+ caf\u00e9 \u2603"
		res := act(t, c, id, client.DesktopAction{Action: "type", Text: &text, Screenshot: true})
		// The screenshot is the action's own, taken once the screen was
		// quiet for 50 ms; on a loaded host Mousepad may pause longer than
		// that between drawing the first characters and the rest (56
		// pixels in one CI run), as xfdesktop may with its menu above.
		after := decode(t, res.Screenshot)
		for deadline := time.Now().Add(30 * time.Second); changed(before, after, win) < 200 && time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
			after = shot(t, c, id, 0)
		}
		if n := changed(before, after, win); n < 200 {
			t.Fatalf("typing changed %d pixels in mousepad's window %v", n, win)
		}
		act(t, c, id, client.DesktopAction{Action: "key", Text: ptr("ctrl+s")})
		var got string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got = shIn(t, c, id, "cat "+file); got == text {
				break
			}
		}
		if got != text {
			t.Fatalf("the file mousepad saved on ctrl+s holds %q, typed %q", got, text)
		}

		// Scroll: many lines, back to the top, then the wheel down.
		lines := strings.Repeat("line\n", 120)
		act(t, c, id, client.DesktopAction{Action: "type", Text: &lines})
		act(t, c, id, client.DesktopAction{Action: "key", Text: ptr("ctrl+Home")})
		mid := []int{win.Min.X + win.Dx()/2, win.Min.Y + win.Dy()/2}
		act(t, c, id, client.DesktopAction{Action: "mouse_move", Coordinate: mid})
		// Mousepad takes its time over 600 keys on a loaded host: the
		// screen before the scroll is the one that stopped changing.
		top := settled(t, c, id)
		amount := 5
		res = act(t, c, id, client.DesktopAction{Action: "scroll", Coordinate: mid, ScrollDirection: "down", ScrollAmount: &amount})
		if res.Cursor.X != mid[0] || res.Cursor.Y != mid[1] {
			t.Errorf("scroll at %v left the cursor at %+v", mid, res.Cursor)
		}
		n := 0
		for deadline := time.Now().Add(30 * time.Second); n < 200 && time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			n = changed(top, shot(t, c, id, 0), win)
		}
		if n < 200 {
			t.Fatalf("scrolling down 5 changed %d pixels in mousepad's window", n)
		}
		shIn(t, c, id, "pkill -x mousepad || true")
	})

	t.Run("bad input", func(t *testing.T) {
		act(t, c, id, client.DesktopAction{Action: "mouse_move", Coordinate: []int{10, 20}})
		for _, tc := range []struct {
			name, body, want string
		}{
			{"unknown action", `{"action":"teleport"}`, "action"},
			{"no action", `{"coordinate":[1,2]}`, "action"},
			{"off the screen", `{"action":"left_click","coordinate":[5000,10]}`, "off the screen"},
			{"off the bottom", `{"action":"mouse_move","coordinate":[10,768]}`, "off the screen"},
			{"negative", `{"action":"mouse_move","coordinate":[-1,5]}`, "coordinate"},
			{"one number", `{"action":"mouse_move","coordinate":[300]}`, "coordinate"},
			{"ill-typed coordinate", `{"action":"left_click","coordinate":["a","b"]}`, "coordinate"},
			{"type without text", `{"action":"type"}`, "text"},
			{"text not a string", `{"action":"type","text":5}`, "text"},
			{"unknown field", `{"action":"left_click","coordinate":[300,300],"button":"left"}`, "button"},
			{"field the action does not take", `{"action":"mouse_move","coordinate":[300,300],"scroll_amount":3}`, "scroll_amount"},
			{"unknown key", `{"action":"key","text":"ctrl+nosuchkey"}`, "nosuchkey"},
			{"bad direction", `{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`, "scroll_direction"},
			{"drag without start", `{"action":"left_click_drag","coordinate":[300,300]}`, "start_coordinate"},
			{"wait too long", `{"action":"wait","duration":3600}`, "duration"},
			{"zoom off the screen", `{"action":"zoom","region":[1000,700,1025,768]}`, "off the screen"},
			{"zoom of no pixels", `{"action":"zoom","region":[10,10,10,30]}`, "region"},
		} {
			status, body := post(t, d, "/v1/sandboxes/"+id+"/desktop/actions", tc.body)
			if status != 400 || !strings.Contains(body, tc.want) {
				t.Errorf("%s: %s answered %d %s; want 400 naming %q", tc.name, tc.body, status, body, tc.want)
			}
		}
		// Nothing moved: none of them reached the pointer.
		if res := act(t, c, id, client.DesktopAction{Action: "cursor_position"}); res.Cursor.X != 10 || res.Cursor.Y != 20 {
			t.Errorf("after the refused actions the cursor is at %+v, not 10,20", res.Cursor)
		}
		for _, w := range []string{"0", "-1", "wide"} {
			if status, body := get(t, d, "/v1/sandboxes/"+id+"/desktop/screenshot?width="+w); status != 400 || !strings.Contains(body, "width") {
				t.Errorf("width=%s: %d %s, want 400 naming width", w, status, body)
			}
		}
		// Another tenant's view of an id that is not a sandbox.
		if _, err := c.DesktopScreenshot(ctx, "sb-nosuch", 0); !isStatus(err, 404) {
			t.Errorf("unknown sandbox: %v, want 404", err)
		}
	})

	t.Run("no display", func(t *testing.T) {
		plain, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		defer c.KillSandbox(ctx, plain.ID)
		_, err = c.DesktopScreenshot(ctx, plain.ID, 0)
		if !isStatus(err, 409) || !strings.Contains(err.Error(), "desktop") {
			t.Errorf("screenshot of a base sandbox: %v, want 409 naming the desktop template", err)
		}
		_, err = c.DesktopAct(ctx, plain.ID, client.DesktopAction{Action: "cursor_position"})
		if !isStatus(err, 409) || !strings.Contains(err.Error(), "desktop") {
			t.Errorf("action on a base sandbox: %v, want 409 naming the desktop template", err)
		}
	})

	t.Run("cli", func(t *testing.T) {
		space := harness.Bin(t, "space")
		env := append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
		out, err := cli(env, space, "desktop", "screenshot", id)
		if err != nil {
			t.Fatalf("space desktop screenshot: %v", err)
		}
		if img := decode(t, out); img.Bounds().Dx() != 1024 || img.Bounds().Dy() != 768 {
			t.Fatalf("space desktop screenshot wrote a %v PNG", img.Bounds())
		}
		if out, err := cli(env, space, "desktop", "move", id, "33", "44"); err != nil || string(out) != "cursor 33 44\n" {
			t.Fatalf("space desktop move: %q %v", out, err)
		}
		if out, err := cli(env, space, "desktop", "click", id, "5000", "5"); err == nil || !strings.Contains(string(out), "off the screen") {
			t.Fatalf("space desktop click off the screen: %q %v", out, err)
		}
	})

	t.Run("bench", func(t *testing.T) {
		benchNative(t, c, id)
	})
}

// benchNative logs the p50 and p90 of native screenshots and clicks, and
// of the same through commands (scrot and a download of its file; xdotool),
// the E2B Desktop SDK's way.
func benchNative(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	const n = 30
	measure := func(name string, f func() error) {
		var ds []time.Duration
		for range n {
			begun := time.Now()
			if err := f(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ds = append(ds, time.Since(begun))
		}
		slices.Sort(ds)
		t.Logf("bench %-34s p50 %7.2f ms  p90 %7.2f ms  (n=%d)", name,
			ms(ds[n/2]), ms(ds[n*9/10]), n)
	}
	measure("native screenshot 1024x768", func() error {
		_, err := c.DesktopScreenshot(ctx, id, 0)
		return err
	})
	measure("native click", func() error {
		_, err := c.DesktopAct(ctx, id, client.DesktopAction{Action: "left_click", Coordinate: []int{900, 700}})
		return err
	})
	measure("native click + screenshot", func() error {
		_, err := c.DesktopAct(ctx, id, client.DesktopAction{Action: "left_click", Coordinate: []int{900, 700}, Screenshot: true})
		return err
	})
	measure("command screenshot (scrot + file)", func() error {
		if _, err := run1(c, id, "scrot --pointer -o /tmp/bench.png"); err != nil {
			return err
		}
		r, err := c.Download(ctx, id, "/tmp/bench.png")
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(io.Discard, r)
		return err
	})
	// As the SDK clicks: a synced move, then the click. The pointer goes
	// back and forth: xdotool's --sync waits for it to move, forever if
	// it is already there.
	i := 0
	measure("command click (xdotool)", func() error {
		i++
		_, err := run1(c, id, fmt.Sprintf("xdotool mousemove --sync %d 700 && xdotool click 1", 900+i%2))
		return err
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr(s string) *string { return &s }

func act(t *testing.T, c *client.Client, id string, a client.DesktopAction) *client.DesktopActionResult {
	t.Helper()
	res, err := c.DesktopAct(context.Background(), id, a)
	if err != nil {
		t.Fatalf("%s: %v", a.Action, err)
	}
	if a.Screenshot && len(res.Screenshot) == 0 {
		t.Fatalf("%s with screenshot: true answered no screenshot", a.Action)
	}
	return res
}

func shot(t *testing.T, c *client.Client, id string, width int) image.Image {
	t.Helper()
	b, err := c.DesktopScreenshot(context.Background(), id, width)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

func decode(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG (%d bytes): %v", len(b), err)
	}
	return img
}

// settled waits for two screenshots in a row to be the same and answers
// the last.
func settled(t *testing.T, c *client.Client, id string) image.Image {
	t.Helper()
	last := shot(t, c, id, 0)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		next := shot(t, c, id, 0)
		if changed(last, next, next.Bounds()) == 0 {
			return next
		}
		last = next
	}
	t.Fatal("the screen never stopped changing")
	return nil
}

// changed counts the pixels of r that differ between a and b.
func changed(a, b image.Image, r image.Rectangle) int {
	r = r.Intersect(a.Bounds()).Intersect(b.Bounds())
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				n++
			}
		}
	}
	return n
}

// samePixels says whether part (from (0, 0)) is whole's region, pixel
// for pixel.
func samePixels(part, whole image.Image, region image.Rectangle) bool {
	for y := region.Min.Y; y < region.Max.Y; y++ {
		for x := region.Min.X; x < region.Max.X; x++ {
			pr, pg, pb, _ := part.At(x-region.Min.X, y-region.Min.Y).RGBA()
			wr, wg, wb, _ := whole.At(x, y).RGBA()
			if pr != wr || pg != wg || pb != wb {
				return false
			}
		}
	}
	return true
}

func colours(img image.Image, r image.Rectangle) int {
	seen := map[[3]uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y; y += 3 {
		for x := r.Min.X; x < r.Max.X; x += 3 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			seen[[3]uint32{cr, cg, cb}] = true
		}
	}
	return len(seen)
}

// waitWindow waits for a visible window of class and answers its place on
// the screen (xdotool's geometry).
func waitWindow(t *testing.T, c *client.Client, id, class string) image.Rectangle {
	t.Helper()
	cmd := "w=$(xdotool search --onlyvisible --class " + class + " | tail -1) && [ -n \"$w\" ] && xdotool getwindowgeometry --shell \"$w\""
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		out, err := run1(c, id, cmd)
		if err != nil {
			continue
		}
		var x, y, w, h int
		for _, l := range strings.Fields(out) {
			fmt.Sscanf(l, "X=%d", &x)
			fmt.Sscanf(l, "Y=%d", &y)
			fmt.Sscanf(l, "WIDTH=%d", &w)
			fmt.Sscanf(l, "HEIGHT=%d", &h)
		}
		if w > 100 && h > 100 {
			// A moment for its first frame to be drawn.
			time.Sleep(time.Second)
			return image.Rect(x, y, x+w, y+h)
		}
	}
	t.Fatalf("no visible %s window", class)
	return image.Rectangle{}
}

// sh runs cmd in the sandbox as its user and answers its stdout; it fails
// t unless the command exits 0.
func shIn(t *testing.T, c *client.Client, id, cmd string) string {
	t.Helper()
	out, err := run1(c, id, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out
}

func run1(c *client.Client, id, cmd string) (string, error) {
	s, err := c.RunCommand(context.Background(), id, client.CommandRequest{Cmd: cmd, Env: map[string]string{"DISPLAY": ":0"}, TimeoutSeconds: 60})
	if err != nil {
		return "", err
	}
	defer s.Close()
	var out, errOut bytes.Buffer
	for {
		ev, err := s.Next()
		if err != nil {
			return out.String(), err
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventStderr:
			errOut.Write(ev.Data)
		case client.EventEnd:
			if ev.Exit == nil || ev.Exit.ExitCode != 0 {
				return out.String(), fmt.Errorf("%s: %+v: %s", cmd, ev.Exit, errOut.String())
			}
			return out.String(), nil
		}
	}
}

// post sends a raw JSON body with the daemon's key and answers the status
// and body.
func post(t *testing.T, d *harness.Daemon, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+d.Addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// get is a GET with the daemon's key; it answers the status and body.
func get(t *testing.T, d *harness.Daemon, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+d.Addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func isStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}

func cli(env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return append(out.Bytes(), errOut.Bytes()...), err
	}
	return out.Bytes(), nil
}
