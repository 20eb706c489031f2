package desktopd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/testenv"
)

// xvfb starts a real Xvfb (as the desktop template does: no TCP, no
// socket file, only the abstract socket) and answers its socket. It runs
// with -noreset: without it the server regenerates when its last client
// leaves (here the readiness probe), and a connection made during that
// reset fails its handshake (a 409 "display is not running" in CI).
func xvfb(t testing.TB, size string) string {
	t.Helper()
	testenv.NeedCommand(t, "Xvfb")
	for n := 90 + os.Getpid()%100; n < 400; n++ {
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); err == nil {
			continue
		}
		cmd := exec.Command("Xvfb", fmt.Sprintf(":%d", n), "-ac", "-screen", "0", size, "-nolisten", "tcp", "-nolisten", "unix", "-noreset")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		lock, started := fmt.Sprintf("/tmp/.X%d-lock", n), false
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
			if started {
				os.Remove(lock) // a killed Xvfb leaves it behind
			}
		})
		socket := fmt.Sprintf("@/tmp/.X11-unix/X%d", n)
		for range 100 {
			select {
			case <-done:
				goto next // the display was taken after all
			default:
			}
			if c, err := net.Dial("unix", socket); err == nil {
				c.Close()
				started = true
				return socket
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("Xvfb :%d did not open its socket", n)
	next:
	}
	t.Fatal("no free display")
	return ""
}

func newServer(t testing.TB, socket, state string) *httptest.Server {
	s := New(Config{Socket: socket, StatePath: state, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func actOK(t *testing.T, srv *httptest.Server, token, body string) computeruse.Result {
	t.Helper()
	code, b := do(t, srv, token, "POST", "/actions", body)
	if code != 200 {
		t.Fatalf("%s: %d %s", body, code, b)
	}
	var res computeruse.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestServer(t *testing.T) {
	socket := xvfb(t, "800x600x24")
	state := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(state, []byte(`{"token":"sandbox-token"}`), 0o600)
	srv := newServer(t, socket, state)
	tok := accesstoken.Desktop("sandbox-token")

	t.Run("auth", func(t *testing.T) {
		for _, bad := range []string{"", "wrong", accesstoken.Interpreter("sandbox-token")} {
			if code, _ := do(t, srv, bad, "GET", "/screenshot", ""); code != 401 {
				t.Errorf("token %q: %d, want 401", bad, code)
			}
		}
		// Positive controls: the derived token, and the access token itself.
		for _, good := range []string{tok, "sandbox-token"} {
			if code, b := do(t, srv, good, "GET", "/screenshot", ""); code != 200 {
				t.Errorf("token %q: %d %s", good, code, b)
			}
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		code, b := do(t, srv, tok, "GET", "/screenshot", "")
		img, err := png.Decode(bytes.NewReader(b))
		if code != 200 || err != nil || img.Bounds() != image.Rect(0, 0, 800, 600) {
			t.Fatalf("%d %v %v", code, err, img)
		}
		code, b = do(t, srv, tok, "GET", "/screenshot?width=200", "")
		img, err = png.Decode(bytes.NewReader(b))
		if code != 200 || err != nil || img.Bounds() != image.Rect(0, 0, 200, 150) {
			t.Fatalf("width=200: %d %v %v", code, err, img)
		}
		for _, w := range []string{"0", "-3", "x"} {
			if code, _ := do(t, srv, tok, "GET", "/screenshot?width="+w, ""); code != 400 {
				t.Errorf("width=%s: %d", w, code)
			}
		}
	})

	t.Run("pointer", func(t *testing.T) {
		res := actOK(t, srv, tok, `{"action":"mouse_move","coordinate":[123,456]}`)
		if res.Cursor != (computeruse.Point{X: 123, Y: 456}) || res.Screen != (computeruse.Size{Width: 800, Height: 600}) {
			t.Fatalf("%+v", res)
		}
		res = actOK(t, srv, tok, `{"action":"left_click_drag","start_coordinate":[10,10],"coordinate":[700,500]}`)
		if res.Cursor != (computeruse.Point{X: 700, Y: 500}) {
			t.Fatalf("drag ended at %+v", res.Cursor)
		}
		for _, body := range []string{
			`{"action":"mouse_move","coordinate":[800,10]}`,
			`{"action":"left_click","coordinate":[5,600]}`,
			`{"action":"teleport"}`,
			`{"action":"left_click","button":"left"}`,
			`{"action":"key","text":"ctrl+nosuch"}`,
		} {
			if code, b := do(t, srv, tok, "POST", "/actions", body); code != 400 {
				t.Errorf("%s: %d %s", body, code, b)
			}
		}
		if res := actOK(t, srv, tok, `{"action":"cursor_position"}`); res.Cursor != (computeruse.Point{X: 700, Y: 500}) {
			t.Fatalf("refused actions moved the cursor to %+v", res.Cursor)
		}
		res = actOK(t, srv, tok, `{"action":"screenshot"}`)
		if img, err := png.Decode(bytes.NewReader(res.Screenshot)); err != nil || img.Bounds().Dx() != 800 {
			t.Fatalf("screenshot action: %v", err)
		}
	})

	t.Run("zoom", func(t *testing.T) {
		// A red 40x30 window at (50, 60) on the black screen; the region
		// from (40, 50) to (100, 100) has it at (10, 10)-(50, 40).
		showWindow(t, socket, 50, 60, 40, 30, 0xff0000)
		res := actOK(t, srv, tok, `{"action":"zoom","region":[40,50,100,100]}`)
		img, err := png.Decode(bytes.NewReader(res.Screenshot))
		if err != nil || img.Bounds() != image.Rect(0, 0, 60, 50) {
			t.Fatalf("zoom: %v %v", err, img)
		}
		for _, p := range []struct {
			x, y int
			red  bool
		}{{10, 10, true}, {49, 39, true}, {30, 25, true}, {9, 10, false}, {50, 39, false}, {10, 40, false}, {0, 0, false}, {59, 49, false}} {
			r, g, b, _ := img.At(p.x, p.y).RGBA()
			if red := r>>8 == 0xff && g == 0 && b == 0; red != p.red {
				t.Errorf("zoomed pixel (%d, %d) = %d,%d,%d, red %v", p.x, p.y, r>>8, g>>8, b>>8, p.red)
			}
		}
		for _, body := range []string{
			`{"action":"zoom","region":[0,0,801,600]}`,
			`{"action":"zoom","region":[10,10,10,20]}`,
			`{"action":"zoom"}`,
		} {
			if code, b := do(t, srv, tok, "POST", "/actions", body); code != 400 {
				t.Errorf("%s: %d %s", body, code, b)
			}
		}
	})

	t.Run("keyboard", func(t *testing.T) {
		keys := listenKeys(t, socket)
		text := "Hello, World! <x> ~_+ 42 caf\u00e9 \u2603"
		actOK(t, srv, tok, fmt.Sprintf(`{"action":"type","text":%q}`, text))
		actOK(t, srv, tok, `{"action":"key","text":"ctrl+s Return"}`)
		got := keys(len([]rune(text)) + 2)
		want := text + "<ctrl+s><Return>"
		if got != want {
			t.Fatalf("the window received %q, want %q", got, want)
		}
	})
}

// xclient connects to the X server on socket as a program on the display
// does; the connection closes when the test ends.
func xclient(tb testing.TB, socket string) *xgb.Conn {
	tb.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := xgb.NewConnNet(nc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// showWindow shows a window of one colour (pixel, 0xRRGGBB on the 24-bit
// screen) at x, y on the display, and waits until the server has drawn it.
func showWindow(t *testing.T, socket string, x, y, w, h int, pixel uint32) {
	t.Helper()
	c := xclient(t, socket)
	scr := xproto.Setup(c).DefaultScreen(c)
	win, _ := xproto.NewWindowId(c)
	xproto.CreateWindow(c, scr.RootDepth, win, scr.Root, int16(x), int16(y), uint16(w), uint16(h), 0, xproto.WindowClassInputOutput,
		scr.RootVisual, xproto.CwBackPixel|xproto.CwOverrideRedirect, []uint32{pixel, 1})
	if err := xproto.MapWindowChecked(c, win).Check(); err != nil {
		t.Fatal(err)
	}
}

// listenKeys opens a window of its own on the display, focused, and
// answers a function that reads n key presses from it and spells them
// (characters as typed; a chord or a named key in <>), read through the
// keyboard mapping as any X client reads it.
func listenKeys(t *testing.T, socket string) func(n int) string {
	t.Helper()
	c := xclient(t, socket)
	setup := xproto.Setup(c)
	scr := setup.DefaultScreen(c)
	win, _ := xproto.NewWindowId(c)
	xproto.CreateWindow(c, scr.RootDepth, win, scr.Root, 0, 0, 800, 600, 0, xproto.WindowClassInputOutput, scr.RootVisual,
		xproto.CwEventMask, []uint32{xproto.EventMaskKeyPress})
	xproto.MapWindow(c, win)
	if err := xproto.SetInputFocusChecked(c, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	modifierCodes := map[xproto.Keycode]bool{}
	mods, err := xproto.GetModifierMapping(c).Reply()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range mods.Keycodes {
		if k != 0 {
			modifierCodes[k] = true
		}
	}
	return func(n int) string {
		var presses []xproto.KeyPressEvent
		for seen := 0; seen < n; {
			ev, xerr := c.WaitForEvent()
			if ev == nil && xerr == nil {
				t.Fatal("X connection closed")
			}
			if kp, ok := ev.(xproto.KeyPressEvent); ok {
				presses = append(presses, kp)
				// Modifiers (Shift, Control) are pressed besides the n keys.
				if _, mod := modifierCodes[kp.Detail]; !mod {
					seen++
				}
			}
		}
		// The mapping now, after space-desktop bound what the layout lacks.
		count := byte(int(setup.MaxKeycode) - int(setup.MinKeycode) + 1)
		m, err := xproto.GetKeyboardMapping(c, setup.MinKeycode, count).Reply()
		if err != nil {
			t.Fatal(err)
		}
		per := int(m.KeysymsPerKeycode)
		var out strings.Builder
		for _, kp := range presses {
			syms := m.Keysyms[(int(kp.Detail)-int(setup.MinKeycode))*per:]
			k := syms[0]
			if kp.State&xproto.ModMaskShift != 0 && syms[1] != 0 {
				k = syms[1]
			}
			switch {
			case computeruse.IsModifier(computeruse.Keysym(k)):
				// Shift for a capital; ctrl shows on the key it holds.
			case kp.State&xproto.ModMaskControl != 0:
				fmt.Fprintf(&out, "<ctrl+%c>", rune(k))
			case k == 0xff0d:
				out.WriteString("<Return>")
			case k >= 0x1000000:
				out.WriteRune(rune(k - 0x1000000))
			default:
				out.WriteRune(rune(k))
			}
		}
		return out.String()
	}
}

func TestScaleDown(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 4, 2))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	// The left half black.
	for y := 0; y < 2; y++ {
		for x := 0; x < 2; x++ {
			copy(img.Pix[y*img.Stride+x*4:], []byte{0, 0, 0, 0xff})
		}
	}
	out := scaleDown(img, 2)
	if out.Bounds() != image.Rect(0, 0, 2, 1) {
		t.Fatalf("bounds %v", out.Bounds())
	}
	if !bytes.Equal(out.Pix, []byte{0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("pixels %v", out.Pix)
	}
	if scaleDown(img, 0) != img || scaleDown(img, 4) != img || scaleDown(img, 9) != img {
		t.Fatal("no scaling asked for, but scaled")
	}
	if got := scaleDown(image.NewRGBA(image.Rect(0, 0, 1024, 768)), 1000).Bounds(); got != image.Rect(0, 0, 1000, 750) {
		t.Fatalf("1024x768 to 1000 wide: %v", got)
	}
}

func TestBGRXToRGBA(t *testing.T) {
	dst := make([]byte, 4)
	bgrxToRGBA(dst, []byte{1, 2, 3, 0}, false)
	if !bytes.Equal(dst, []byte{3, 2, 1, 0xff}) {
		t.Fatalf("LSB first: %v", dst)
	}
	bgrxToRGBA(dst, []byte{0, 3, 2, 1}, true)
	if !bytes.Equal(dst, []byte{3, 2, 1, 0xff}) {
		t.Fatalf("MSB first: %v", dst)
	}
}
