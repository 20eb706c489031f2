package desktopd

import (
	"bytes"
	"image/png"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"
)

// An action's screenshot waits for what a program draws in answer to the
// action: a client of the display paints a rectangle when the root window
// is clicked, as a program paints its answer to a click, and the click's
// screenshot shows it (and a screenshot before the click does not: the
// positive control). This is the path through the DAMAGE extension's
// reports (Xvfb has it), not only the fixed wait.
func TestSettleShowsTheAnswer(t *testing.T) {
	socket := xvfb(t, "640x480x24")
	s := New(Config{Socket: socket, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	painted := paintOnClick(t, socket)

	red := func(b []byte) bool {
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r, g, bl, _ := img.At(150, 150).RGBA()
		return r>>8 == 0xff && g == 0 && bl == 0
	}
	code, before := do(t, srv, "", "GET", "/screenshot", "")
	if code != 200 {
		t.Fatalf("screenshot: %d %s", code, before)
	}
	if red(before) {
		t.Fatal("the rectangle is there before the click")
	}
	begun := time.Now()
	res := actOK(t, srv, "", `{"action":"left_click","coordinate":[500,400],"screenshot":true}`)
	t.Logf("click with screenshot: %s", time.Since(begun).Round(time.Millisecond))
	<-painted
	if s.d.damaged == nil {
		t.Error("no DAMAGE watch on the display: the settle was the fixed wait")
	}
	if !red(res.Screenshot) {
		t.Error("the click's screenshot does not show what was painted in answer to it")
	}
}

// paintOnClick connects to the display as a program would and paints a
// red rectangle at (100,100)-(200,200) on the root window at its first
// button press; the channel closes once it has.
func paintOnClick(t *testing.T, socket string) <-chan struct{} {
	t.Helper()
	c := xclient(t, socket)
	screen := xproto.Setup(c).DefaultScreen(c)
	root := screen.Root
	if err := xproto.ChangeWindowAttributesChecked(c, root, xproto.CwEventMask, []uint32{xproto.EventMaskButtonPress}).Check(); err != nil {
		t.Fatal(err)
	}
	gc, err := xproto.NewGcontextId(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := xproto.CreateGCChecked(c, gc, xproto.Drawable(root), xproto.GcForeground|xproto.GcSubwindowMode,
		[]uint32{0xff0000, xproto.SubwindowModeIncludeInferiors}).Check(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := c.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if _, ok := ev.(xproto.ButtonPressEvent); ok {
				xproto.PolyFillRectangle(c, xproto.Drawable(root), gc, []xproto.Rectangle{{X: 100, Y: 100, Width: 100, Height: 100}})
				xproto.GetInputFocus(c).Reply() // the paint is done
				return
			}
		}
	}()
	return done
}
