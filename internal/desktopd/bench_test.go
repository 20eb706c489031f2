package desktopd

import (
	"image"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jezek/xgb/xproto"
)

// The server alone on a real Xvfb at 1024x768 (no spaced, no sandbox):
// go test -run '^$' -bench . ./internal/desktopd/. test/desktop's
// TestDesktopNative/bench measures the same through spaced and gVisor.

func BenchmarkScreenshot(b *testing.B) {
	socket := xvfb(b, "1024x768x24")
	paint(b, socket, screenLike(1024, 768))
	srv := newServer(b, socket, "")
	n := 0
	for b.Loop() {
		resp, err := http.Get(srv.URL + "/screenshot")
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		n = len(body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(n), "bytes")
}

func BenchmarkClick(b *testing.B) {
	srv := newServer(b, xvfb(b, "1024x768x24"), "")
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/actions", "application/json", strings.NewReader(`{"action":"left_click","coordinate":[500,400]}`))
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp)
		}
		resp.Body.Close()
	}
}

func BenchmarkClickScreenshot(b *testing.B) {
	srv := newServer(b, xvfb(b, "1024x768x24"), "")
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/actions", "application/json", strings.NewReader(`{"action":"left_click","coordinate":[500,400],"screenshot":true}`))
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp)
		}
		resp.Body.Close()
	}
}

// paint puts img on the display's root window (a screen to encode that
// is not all black: a blank screen's PNG costs next to nothing).
func paint(b *testing.B, socket string, img *image.RGBA) {
	// Open while the benchmark runs: Xvfb resets the screen when its last
	// client goes.
	c := xclient(b, socket)
	screen := xproto.Setup(c).DefaultScreen(c)
	gc, _ := xproto.NewGcontextId(c)
	xproto.CreateGC(c, gc, xproto.Drawable(screen.Root), 0, nil)
	w := img.Rect.Dx()
	const rows = 32 // 128 KiB a request: below the core protocol's bound
	for y := 0; y < img.Rect.Dy(); y += rows {
		h := min(rows, img.Rect.Dy()-y)
		data := make([]byte, 0, w*h*4)
		for yy := y; yy < y+h; yy++ {
			for x := 0; x < w; x++ {
				p := img.Pix[yy*img.Stride+4*x:]
				data = append(data, p[2], p[1], p[0], 0) // BGRX
			}
		}
		if err := xproto.PutImageChecked(c, xproto.ImageFormatZPixmap, xproto.Drawable(screen.Root), gc,
			uint16(w), uint16(h), 0, int16(y), 0, screen.RootDepth, data).Check(); err != nil {
			b.Fatal(err)
		}
	}
}
