package desktopd

import "image"

// scaleDown shrinks img to width pixels wide keeping its aspect (height
// rounded, at least 1), each pixel the mean of the box it covers. A width
// of 0, or not below img's, is img itself.
func scaleDown(img *image.RGBA, width int) *image.RGBA {
	sw, sh := img.Rect.Dx(), img.Rect.Dy()
	if width <= 0 || width >= sw {
		return img
	}
	height := max(1, (sh*width+sw/2)/sw)
	out := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := 0; y < height; y++ {
		y0, y1 := y*sh/height, max((y+1)*sh/height, y*sh/height+1)
		for x := 0; x < width; x++ {
			x0, x1 := x*sw/width, max((x+1)*sw/width, x*sw/width+1)
			var r, g, b, n int
			for yy := y0; yy < y1; yy++ {
				row := img.Pix[yy*img.Stride:]
				for xx := x0; xx < x1; xx++ {
					p := row[xx*4:]
					r, g, b, n = r+int(p[0]), g+int(p[1]), b+int(p[2]), n+1
				}
			}
			o := out.Pix[y*out.Stride+x*4:]
			o[0], o[1], o[2], o[3] = byte(r/n), byte(g/n), byte(b/n), 0xff
		}
	}
	return out
}
