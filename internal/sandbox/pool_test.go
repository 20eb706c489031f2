package sandbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// unbuiltTemplates resolves no template until built is set.
type unbuiltTemplates struct {
	fakeTemplates
	built atomic.Bool
}

func (u *unbuiltTemplates) Resolve(ctx context.Context, ref string) (*Image, error) {
	if !u.built.Load() {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", ref)
	}
	return u.fakeTemplates.Resolve(ctx, ref)
}

// TestPoolsFollowTemplatesAndDrain: a pool whose template is not built
// backs off for 30 s, and TemplateChanged makes it refill at once (the
// wait below is 5 s, so without the wake-up the test fails); a draining
// node's pools empty at once and creates are refused, and undraining
// refills them.
func TestPoolsFollowTemplatesAndDrain(t *testing.T) {
	tpl := &unbuiltTemplates{fakeTemplates: fakeTemplates{}}
	w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 1, Max: 2}, templates: tpl})
	tpl.fakeTemplates.root = w.root
	pools := w.svc.Pools()
	p := pools.byTemplate["base"]
	w.svc.StartPools(context.Background())
	waitFor(t, "the refill to fail and back off", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.retryAt.IsZero() && p.booting == 0
	})
	tpl.built.Store(true)
	pools.TemplateChanged("other") // another template: no wake-up
	pools.TemplateChanged("base")
	waitFor(t, "the pool to refill once its template is built", func() bool { return pools.PoolSizes()["base"] == 1 })

	w.svc.SetDraining(true)
	if n := pools.PoolSizes()["base"]; n != 0 {
		t.Errorf("a draining node's pool holds %d sandboxes, want 0", n)
	}
	if _, err := w.svc.Create(context.Background(), CreateRequest{Template: "base"}); errdefs.Class(err) != errdefs.ErrUnavailable {
		t.Errorf("create on a draining node: %v, want unavailable", err)
	}
	w.accounted()
	w.svc.SetDraining(false)
	waitFor(t, "the pool to refill after the drain", func() bool { return pools.PoolSizes()["base"] == 1 })
	w.svc.Close()
	w.accounted()
}

func TestRefillBackoff(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, 2 * time.Second}, {2, 4 * time.Second}, {3, 8 * time.Second},
		{5, 32 * time.Second}, {6, time.Minute}, {100, time.Minute},
	} {
		if got := refillBackoff(tc.failures); got != tc.want {
			t.Errorf("refillBackoff(%d) = %s, want %s", tc.failures, got, tc.want)
		}
	}
}
