package template

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestImageLayerLimit: an image is not made of a layer whose files are
// over MaxImage; the error says which setting, and no image is left.
func TestImageLayerLimit(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, func(c *Config) { c.MaxImage = 1000 })
	big, small := key('b'), key('s')
	e.storeLayer(t, big, map[string]string{"a": strings.Repeat("a", 600), "b": strings.Repeat("b", 600)})
	e.storeLayer(t, small, map[string]string{"a": strings.Repeat("a", 600)})
	open := func(k string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return e.s.art.openLayer(ctx, k) }
	}
	_, err := e.s.im.derive(ctx, big, "", "", open(big))
	if errdefs.Class(err) != errdefs.ErrTooLarge || !strings.Contains(err.Error(), "SPACE_TEMPLATE_MAX_IMAGE") {
		t.Fatalf("err = %v, want too large naming SPACE_TEMPLATE_MAX_IMAGE", err)
	}
	if e.s.im.has(e.s.im.id(big)) || len(e.s.im.list()) != 0 {
		t.Errorf("an image was left: %v", e.s.im.list())
	}
	if _, err := e.s.im.derive(ctx, small, "", "", open(small)); err != nil {
		t.Errorf("a layer under the limit: %v", err)
	}
}
