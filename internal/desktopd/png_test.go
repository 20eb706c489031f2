package desktopd

import (
	"bytes"
	"image"
	"image/png"
	"math/rand/v2"
	"testing"
)

// screenLike is a w x h opaque image like a desktop's: flat areas, a
// gradient, windows with "text" (noise in short runs).
func screenLike(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rng := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			p := img.Pix[y*img.Stride+4*x:]
			switch {
			case y < 24: // a panel
				p[0], p[1], p[2] = 0x30, 0x30, 0x30
			case x > w/8 && x < w*3/4 && y > h/6 && y < h*5/6: // a window with text
				p[0], p[1], p[2] = 0xff, 0xff, 0xff
				if (y/16)%2 == 0 && rng.IntN(5) == 0 {
					v := byte(rng.IntN(256))
					p[0], p[1], p[2] = v, v, v
				}
			default: // the wallpaper's gradient
				p[0], p[1], p[2] = byte(x*255/w), byte(y*255/h), 0x80
			}
			p[3] = 0xff
		}
	}
	return img
}

func TestPNGEncoder(t *testing.T) {
	var e pngEncoder
	for _, tc := range []struct {
		name string
		img  *image.RGBA
	}{
		{"screen", screenLike(1024, 768)},
		{"one pixel", screenLike(1, 1)},
		{"odd size", screenLike(333, 17)},
		// A sub-image: its stride is wider than its rows.
		{"sub-image", screenLike(64, 64).SubImage(image.Rect(10, 20, 50, 60)).(*image.RGBA)},
		// Twice with the same encoder: its buffers are reused.
		{"again", screenLike(1024, 768)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := e.encode(&out, tc.img); err != nil {
				t.Fatal(err)
			}
			got, err := png.Decode(&out)
			if err != nil {
				t.Fatalf("image/png cannot read it: %v", err)
			}
			b := tc.img.Bounds()
			if got.Bounds().Dx() != b.Dx() || got.Bounds().Dy() != b.Dy() {
				t.Fatalf("size %v, want %v", got.Bounds(), b)
			}
			for y := 0; y < b.Dy(); y++ {
				for x := 0; x < b.Dx(); x++ {
					wr, wg, wb, _ := tc.img.At(b.Min.X+x, b.Min.Y+y).RGBA()
					gr, gg, gb, ga := got.At(x, y).RGBA()
					if wr != gr || wg != gg || wb != gb || ga != 0xffff {
						t.Fatalf("pixel %d,%d: %x %x %x %x, want %x %x %x opaque", x, y, gr, gg, gb, ga, wr, wg, wb)
					}
				}
			}
		})
	}
	if err := e.encode(new(bytes.Buffer), image.NewRGBA(image.Rect(0, 0, 0, 0))); err == nil {
		t.Error("an empty image was encoded")
	}
}

// The encoder against image/png at BestSpeed (what the server used), on
// the same screen-like image: go test -run '^$' -bench PNG ./internal/desktopd/
func BenchmarkPNG(b *testing.B) {
	img := screenLike(1024, 768)
	b.Run("pngEncoder", func(b *testing.B) {
		var e pngEncoder
		var out bytes.Buffer
		for b.Loop() {
			out.Reset()
			if err := e.encode(&out, img); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(out.Len()), "bytes")
	})
	b.Run("image/png", func(b *testing.B) {
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		var out bytes.Buffer
		for b.Loop() {
			out.Reset()
			if err := enc.Encode(&out, img); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(out.Len()), "bytes")
	})
}
