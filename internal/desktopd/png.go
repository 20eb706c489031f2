package desktopd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"

	"github.com/klauspost/compress/zlib"
)

// pngEncoder writes an opaque screen as an 8-bit RGB PNG, for the
// screenshot's hot path. image/png spends most of a 1024x768 screenshot
// trying all five row filters on every row (at every compression level)
// and in compress/flate; this writes every row with the Up filter (a
// screen's rows mostly repeat the one above: that is zeros) and deflates
// with klauspost/compress's zlib at BestSpeed, about twice as fast as the
// standard library's. Its buffers are reused: it is not safe for
// concurrent use (the server calls it with the display's lock held).
type pngEncoder struct {
	zw   *zlib.Writer
	idat bytes.Buffer
	row  []byte // one filtered row
}

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// encode writes img (its alpha ignored: the screen is opaque) to out.
func (e *pngEncoder) encode(out *bytes.Buffer, img *image.RGBA) error {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if w <= 0 || h <= 0 {
		return fmt.Errorf("png: empty image %dx%d", w, h)
	}
	e.idat.Reset()
	if e.zw == nil {
		zw, err := zlib.NewWriterLevel(&e.idat, zlib.BestSpeed)
		if err != nil {
			return fmt.Errorf("png: %w", err)
		}
		e.zw = zw
	} else {
		e.zw.Reset(&e.idat)
	}
	n := 1 + 3*w
	if cap(e.row) < n {
		e.row = make([]byte, n)
	}
	row := e.row[:n]
	row[0] = 2 // Up: each byte less the one above it
	for y := range h {
		src := img.Pix[y*img.Stride : y*img.Stride+4*w]
		if y == 0 {
			for x, s := 1, 0; s+3 < len(src); x, s = x+3, s+4 {
				row[x], row[x+1], row[x+2] = src[s], src[s+1], src[s+2]
			}
		} else {
			up := img.Pix[(y-1)*img.Stride : (y-1)*img.Stride+4*w]
			for x, s := 1, 0; s+3 < len(src); x, s = x+3, s+4 {
				row[x], row[x+1], row[x+2] = src[s]-up[s], src[s+1]-up[s+1], src[s+2]-up[s+2]
			}
		}
		if _, err := e.zw.Write(row); err != nil {
			return fmt.Errorf("png: %w", err)
		}
	}
	if err := e.zw.Close(); err != nil {
		return fmt.Errorf("png: %w", err)
	}
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits per sample, truecolour
	out.Grow(len(pngSignature) + 3*12 + len(ihdr) + e.idat.Len())
	out.Write(pngSignature)
	chunk(out, "IHDR", ihdr[:])
	chunk(out, "IDAT", e.idat.Bytes())
	chunk(out, "IEND", nil)
	return nil
}

// chunk writes one PNG chunk: length, type, data, CRC of type and data.
func chunk(out *bytes.Buffer, typ string, data []byte) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(len(data)))
	out.Write(b[:])
	out.WriteString(typ)
	out.Write(data)
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	binary.BigEndian.PutUint32(b[:], crc.Sum32())
	out.Write(b[:])
}
