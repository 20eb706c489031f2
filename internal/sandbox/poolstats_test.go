package sandbox

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime/fakeruntime"
)

// TestSetPool: an admin resizes a pool at run time; it refills to a raised
// minimum, tears down what is beyond a lowered maximum, and refuses bad
// sizes and pools the configuration did not make.
func TestSetPool(t *testing.T) {
	w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 1, Max: 2}})
	w.svc.StartPools(context.Background())
	waitFor(t, "the pool to fill to 1", func() bool { return w.svc.Pools().PoolSizes()["base"] == 1 })

	st, err := w.svc.Pools().SetPool("base", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if st.Min != 3 || st.Max != 4 || st.Target != 3 {
		t.Errorf("after SetPool(3, 4): %+v", st)
	}
	waitFor(t, "the pool to refill to 3", func() bool { return w.svc.Pools().PoolSizes()["base"] == 3 })

	if st, err = w.svc.Pools().SetPool("base", 0, 1); err != nil {
		t.Fatal(err)
	}
	if st.Ready != 1 || st.Target != 1 {
		t.Errorf("after SetPool(0, 1): %+v", st)
	}
	for _, tc := range []struct {
		template string
		min, max int
		class    error
	}{
		{"base", 2, 1, errdefs.ErrInvalidArgument},
		{"base", -1, 1, errdefs.ErrInvalidArgument},
		{"base", 0, 1001, errdefs.ErrInvalidArgument},
		{"other", 0, 1, errdefs.ErrNotFound},
	} {
		if _, err := w.svc.Pools().SetPool(tc.template, tc.min, tc.max); !errors.Is(err, tc.class) {
			t.Errorf("SetPool(%q, %d, %d) = %v, want %v", tc.template, tc.min, tc.max, err, tc.class)
		}
	}
	w.svc.Close()
	w.accounted()
}

// TestSetPoolDuringRefill: a pool resized below what it holds while a
// refill boots does not keep that boot when it lands: it is torn down,
// not left ready beyond the new maximum for good.
func TestSetPoolDuringRefill(t *testing.T) {
	w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 1, Max: 1}})
	gate, held := make(chan struct{}), make(chan struct{}, 1)
	w.rt.Fail(fakeruntime.OpCreate, func(string) error {
		select {
		case held <- struct{}{}:
		default:
		}
		<-gate // the boot takes as long as the test wants
		return nil
	})
	w.svc.StartPools(context.Background())
	<-held
	if _, err := w.svc.Pools().SetPool("base", 0, 0); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitFor(t, "the refill to land", func() bool {
		for _, st := range w.svc.Pools().PoolStats() {
			if st.Template == "base" {
				return st.Booting == 0
			}
		}
		return false
	})
	if n := w.svc.Pools().PoolSizes()["base"]; n != 0 {
		t.Errorf("a pool resized to 0 while a refill booted holds %d ready sandboxes, want 0", n)
	}
	w.svc.Close()
	w.accounted()
}

// TestCollector: the service's gauges, registered once it exists, report
// the sandboxes running and each pool's ready, booting and target sizes.
func TestCollector(t *testing.T) {
	w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 2, Max: 2}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(w.svc))
	w.svc.StartPools(context.Background())
	waitFor(t, "the pool to fill to 2", func() bool { return w.svc.Pools().PoolSizes()["base"] == 2 })
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"space_sandboxes_running": 0, "space_sandboxes_resting/frozen": 0, "space_sandboxes_resting/hibernated": 0, "space_pool_ready/base": 2, "space_pool_booting/base": 0, "space_pool_target/base": 2}
	if !maps.Equal(got, want) {
		t.Errorf("gauges %v, want %v", got, want)
	}
	w.svc.Close()
	w.accounted()
}
