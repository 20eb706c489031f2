package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/runtime"
)

// admitReadings is a runtime's list and usage readings that counts the
// readings of each sandbox.
type admitReadings struct {
	ids   []string
	mem   map[string]uint64
	reads map[string]int
}

func (c *admitReadings) List(context.Context) ([]string, error) { return c.ids, nil }

func (c *admitReadings) Usage(_ context.Context, id string) (runtime.Usage, error) {
	c.reads[id]++
	return runtime.Usage{Memory: c.mem[id], Disk: 10, Files: 1}, nil
}

// TestUsageSamplerFrozenReading: admission reads a frozen sandbox once per
// rest and takes that reading for the rest of it; an awake one, one
// frozen again after a thaw, and one whose rest cannot say (its lock is
// held) are read every time.
func TestUsageSamplerFrozenReading(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	type state struct {
		since  time.Time
		frozen bool
	}
	tests := []struct {
		name string
		// states is the sandbox's state at each of the samples.
		states []state
		// mems is what it holds at each sample.
		mems      []uint64
		wantReads int
		wantLast  int64
	}{
		{"awake", []state{{}, {}, {}}, []uint64{100, 200, 300}, 3, 300},
		{"frozen", []state{{t0, true}, {t0, true}, {t0, true}}, []uint64{100, 200, 300}, 1, 100},
		{"frozen after a sample awake", []state{{}, {t0, true}, {t0, true}}, []uint64{100, 200, 300}, 2, 200},
		{"thawed", []state{{t0, true}, {t0, true}, {}}, []uint64{100, 200, 300}, 2, 300},
		{"frozen again", []state{{t0, true}, {}, {t0.Add(time.Minute), true}, {t0.Add(time.Minute), true}}, []uint64{100, 200, 300, 400}, 3, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &admitReadings{ids: []string{"a"}, mem: map[string]uint64{}, reads: map[string]int{}}
			var now state
			u := newUsageSampler(rt, rt, func(id string) (time.Time, bool) { return now.since, now.frozen })
			var last map[string]admission.Usage
			for i, st := range tt.states {
				now, rt.mem["a"] = st, tt.mems[i]
				var err error
				if last, err = u.All(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if rt.reads["a"] != tt.wantReads {
				t.Errorf("reads = %d, want %d", rt.reads["a"], tt.wantReads)
			}
			if got := last["a"]; got.Memory != tt.wantLast || got.Disk != 11 {
				t.Errorf("last sample = %+v, want memory %d, disk 11", got, tt.wantLast)
			}
		})
	}
}

// TestUsageSamplerForgetsGone: the reading of a frozen sandbox that is no
// longer listed is dropped.
func TestUsageSamplerForgetsGone(t *testing.T) {
	rt := &admitReadings{ids: []string{"a", "b"}, mem: map[string]uint64{"a": 1, "b": 2}, reads: map[string]int{}}
	u := newUsageSampler(rt, rt, func(string) (time.Time, bool) { return time.Unix(1, 0), true })
	if _, err := u.All(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt.ids = []string{"b"}
	if _, err := u.All(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := u.frozen["a"]; ok || len(u.frozen) != 1 {
		t.Errorf("frozen readings = %v, want only b's", u.frozen)
	}
}

// TestRestFrozenSinceNeverWaits: while the rest's lock is held (a wake in
// progress, which may ask admission to measure the sandbox), frozenSince
// answers not frozen rather than wait for it.
func TestRestFrozenSinceNeverWaits(t *testing.T) {
	t0 := time.Unix(100, 0)
	r := &rest{frozen: true, restedAt: t0}
	if since, frozen := r.frozenSince(); !frozen || !since.Equal(t0) {
		t.Fatalf("frozenSince = %v, %v; want %v, true", since, frozen, t0)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, frozen := r.frozenSince(); frozen {
		t.Error("frozenSince under a held lock = frozen, want not frozen (and no wait)")
	}
}
