package admission

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

const gib = 1 << 30

func TestDecide(t *testing.T) {
	budget := Budget{MemoryBytes: 1 * gib, DiskBytes: 10 * gib, Sandboxes: 10, MemoryFloor: 256 * mib, DiskFloor: 1 * gib}
	roomyHost := Host{MemTotal: 16 * gib, MemAvailable: 12 * gib, DiskTotal: 100 * gib, DiskFree: 50 * gib}
	need := func(memMiB int64) Need { return Need{Usage: Usage{Memory: memMiB * mib, Disk: mib}} }
	for _, tc := range []struct {
		name   string
		totals Totals
		need   Need
		want   Resource // "" admits
		scope  string
	}{
		{"empty node", Totals{Host: roomyHost}, need(20), "", ""},
		{"no host sample yet", Totals{}, need(20), "", ""},
		{"memory fits exactly", Totals{Used: Usage{Memory: 1004 * mib}, Count: 5, Host: roomyHost}, need(20), "", ""},
		{"memory over", Totals{Used: Usage{Memory: 1005 * mib}, Count: 5, Host: roomyHost}, need(20), Memory, "node"},
		{"reservations count", Totals{Used: Usage{Memory: 900 * mib}, Count: 5, Pending: Usage{Memory: 120 * mib}, PendingCount: 4, Host: roomyHost}, need(20), Memory, "node"},
		{"sandbox budget", Totals{Count: 10, Host: roomyHost}, need(1), Sandboxes, "node"},
		{"sandbox budget with starts in flight", Totals{Count: 8, PendingCount: 2, Host: roomyHost}, need(1), Sandboxes, "node"},
		{"one sandbox left", Totals{Count: 9, Host: roomyHost}, need(1), "", ""},
		{"disk over", Totals{Used: Usage{Disk: 10 * gib}, Host: roomyHost}, need(1), Disk, "node"},
		{"host memory low", Totals{Host: Host{MemTotal: 16 * gib, MemAvailable: 270 * mib, DiskTotal: 100 * gib, DiskFree: 50 * gib}}, need(20), Memory, "host"},
		{"host memory low once unseen boots count", Totals{Unseen: Usage{Memory: 100 * mib}, Host: Host{MemTotal: 16 * gib, MemAvailable: 370 * mib, DiskTotal: 100 * gib, DiskFree: 50 * gib}}, need(20), Memory, "host"},
		{"host disk low", Totals{Host: Host{MemTotal: 16 * gib, MemAvailable: 12 * gib, DiskTotal: 100 * gib, DiskFree: gib}}, need(1), Disk, "host"},
		// Pools fill only PoolShare of each budget.
		{"pool below its share", Totals{Used: Usage{Memory: 800 * mib}, Host: roomyHost}, Need{Usage: Usage{Memory: 20 * mib}, Pool: true}, "", ""},
		{"pool at its share", Totals{Used: Usage{Memory: 910 * mib}, Host: roomyHost}, Need{Usage: Usage{Memory: 20 * mib}, Pool: true}, Memory, "node"},
		{"pool at its sandbox share", Totals{Count: 9, Host: roomyHost}, Need{Pool: true}, Sandboxes, "node"},
		// A big disk's budget: the creates' reserve on the host is at most
		// the host's floor again (2 GiB here), not a tenth of 200 GiB.
		{"pool on a big disk with room", Totals{Host: Host{MemTotal: 16 * gib, MemAvailable: 12 * gib, DiskTotal: 250 * gib, DiskFree: 20 * gib}}, Need{Usage: Usage{Disk: mib}, Pool: true}, "", ""},
		{"pool on a big disk near its floor", Totals{Host: Host{MemTotal: 16 * gib, MemAvailable: 12 * gib, DiskTotal: 250 * gib, DiskFree: 2*gib + 1000*mib}}, Need{Usage: Usage{Disk: mib}, Pool: true}, Disk, "host"},
		{"create on a big disk near its floor", Totals{Host: Host{MemTotal: 16 * gib, MemAvailable: 12 * gib, DiskTotal: 250 * gib, DiskFree: 2*gib + 1000*mib}}, Need{Usage: Usage{Disk: mib}}, "", ""},
		{"create where a pool may not", Totals{Used: Usage{Memory: 910 * mib}, Host: roomyHost}, need(20), "", ""},
		{"no budgets", Totals{Used: Usage{Memory: 100 * gib}, Count: 1e6}, need(20), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budget
			switch {
			case tc.name == "no budgets":
				b = Budget{}
			case strings.Contains(tc.name, "big disk"):
				b.DiskBytes, b.DiskFloor = 200*gib, 2*gib
			}
			r := decide(b, tc.totals, tc.need)
			switch {
			case tc.want == "" && r != nil:
				t.Fatalf("refused: %v", r)
			case tc.want != "" && r == nil:
				t.Fatalf("admitted, want a refusal for %s", tc.want)
			case r != nil && (r.Resource != tc.want || r.Scope != tc.scope):
				t.Fatalf("refused for %s/%s, want %s/%s: %v", r.Resource, r.Scope, tc.want, tc.scope, r)
			}
		})
	}
}

func TestRefusalError(t *testing.T) {
	r := decide(Budget{MemoryBytes: 200 * mib}, Totals{Used: Usage{Memory: 190 * mib}}, Need{Usage: Usage{Memory: 20 * mib}})
	if r == nil {
		t.Fatal("admitted")
	}
	if *r != (Refusal{Resource: Memory, Scope: "node", Unit: "MiB", Budget: 200, Used: 190, Requested: 20}) {
		t.Errorf("refusal %+v", *r)
	}
	err := r.Err()
	if errdefs.Class(err) != errdefs.ErrCapacity || !errors.Is(r, errdefs.ErrCapacity) {
		t.Errorf("class %v", errdefs.Class(err))
	}
	if code, name := errdefs.HTTPStatus(err); code != 503 || name != "node_at_capacity" {
		t.Errorf("status %d %s", code, name)
	}
	if msg := errdefs.PublicMessage(err); !strings.Contains(msg, "memory budget") || !strings.Contains(msg, "190 of 200 MiB") {
		t.Errorf("message %q", msg)
	}
	if errdefs.Details(err) != r {
		t.Errorf("details %v", errdefs.Details(err))
	}
}

// fakeSampler is what a runtime would measure.
type fakeSampler struct {
	mu  sync.Mutex
	use map[string]Usage
}

func (f *fakeSampler) set(id string, u Usage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u == (Usage{}) {
		delete(f.use, id)
	} else {
		f.use[id] = u
	}
}

func (f *fakeSampler) All(context.Context) (map[string]Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Usage{}
	for k, v := range f.use {
		out[k] = v
	}
	return out, nil
}

func (f *fakeSampler) One(_ context.Context, id string) (Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.use[id], nil
}

// TestControllerBurst: reservations make a burst of starts, all checked
// before any is measured, stop at the budget; measured, ended and failed
// starts free what they held.
func TestControllerBurst(t *testing.T) {
	ctx := context.Background()
	fs := &fakeSampler{use: map[string]Usage{}}
	count := 0
	c := New(Config{Budget: Budget{MemoryBytes: 100 * mib}, Sampler: fs, Count: func() int { return count }})
	need := Need{Usage: Usage{Memory: 20 * mib}, Fresh: true}
	var admitted []*Reservation
	for range 10 {
		r, ref := c.Admit(need)
		if ref != nil {
			break
		}
		admitted = append(admitted, r)
	}
	if len(admitted) != 5 {
		t.Fatalf("a burst admitted %d starts of 20 MiB into 100 MiB, want 5", len(admitted))
	}
	// One fails; four boot and are measured at 15 MiB each.
	admitted[4].Cancel()
	for i, r := range admitted[:4] {
		id := string(rune('a' + i))
		fs.set(id, Usage{Memory: 15 * mib})
		count++
		r.Done(ctx, id)
		r.Done(ctx, id) // twice is once
	}
	if got := c.Totals(); got.Used.Memory != 60*mib || got.Pending.Memory != 0 || got.PendingCount != 0 {
		t.Fatalf("totals %+v", got)
	}
	// 60 MiB used: two more of 20 fit, the third does not.
	r1, ref1 := c.Admit(need)
	r2, ref2 := c.Admit(need)
	_, ref3 := c.Admit(need)
	if ref1 != nil || ref2 != nil || ref3 == nil {
		t.Fatalf("refusals %v %v %v", ref1, ref2, ref3)
	}
	c.Refused(ref3)
	r1.Cancel()
	r2.Cancel()
	// A sandbox grows; the next sample sees it.
	fs.set("a", Usage{Memory: 80 * mib})
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ref := c.Admit(need); ref == nil || ref.Used != 125 {
		t.Fatalf("after growth: %v", ref)
	}
	// It ends: free at once, before any sample.
	fs.set("a", Usage{})
	count--
	c.Forget("a")
	if r, ref := c.Admit(need); ref != nil {
		t.Fatalf("after an end: %v", ref)
	} else {
		r.Cancel()
	}
	if got := c.Refusals(); got[[2]string{"memory", "node"}] != 1 {
		t.Errorf("refusals %v", got)
	}
	// The estimate learnt from the boots moved towards 15 MiB.
	if e := c.Estimate(0); e.Memory >= initialMemoryEstimate || e.Memory <= 15*mib {
		t.Errorf("estimate %d MiB", e.Memory/mib)
	}
	if e := c.Estimate(8 * mib); e.Memory != 8*mib {
		t.Errorf("estimate above the limit: %d", e.Memory)
	}
}

func TestNilControllerAdmitsAll(t *testing.T) {
	var c *Controller
	r, ref := c.Admit(Need{Usage: Usage{Memory: 1 << 40}})
	if ref != nil {
		t.Fatal(ref)
	}
	r.Done(context.Background(), "x")
	r.Cancel()
	c.Forget("x")
}

func TestResolve(t *testing.T) {
	h := Host{MemTotal: 24 * gib, DiskTotal: 250 * gib}
	share := func(f float64, n int64) int64 { return int64(f * float64(n)) }
	b := Resolve(Settings{}, h, 16384, 32768)
	if b.MemoryBytes != share(DefaultMemoryShare, h.MemTotal) || b.DiskBytes != share(DefaultDiskShare, h.DiskTotal) || b.Sandboxes != 1024 {
		t.Errorf("defaults %+v", b)
	}
	if b.MemoryFloor != gib || b.DiskFloor != 2*gib {
		t.Errorf("floors %+v", b)
	}
	small := Resolve(Settings{MemoryMB: 200, DiskMB: 1000, Sandboxes: 3}, Host{MemTotal: 4 * gib, DiskTotal: 10 * gib}, 64, 0)
	if small.MemoryBytes != 200*mib || small.DiskBytes != 1000*mib || small.Sandboxes != 3 || small.MemoryFloor != share(floorShare, 4*gib) {
		t.Errorf("set %+v", small)
	}
	if b := Resolve(Settings{}, h, 60, 32768); b.Sandboxes != 60 {
		t.Errorf("slots bound: %d", b.Sandboxes)
	}
}

func TestReadHost(t *testing.T) {
	h, err := ReadHost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if h.MemTotal <= 0 || h.MemAvailable <= 0 || h.MemAvailable > h.MemTotal || h.DiskTotal <= 0 || h.DiskFree > h.DiskTotal {
		t.Errorf("host %+v", h)
	}
}

// TestHostRefusalRereadsHost: a refusal for the host's sake is decided
// again on a fresh reading, so space freed a moment ago is used at once.
func TestHostRefusalRereadsHost(t *testing.T) {
	free := int64(0)
	reads := 0
	c := New(Config{
		Budget:  Budget{DiskFloor: 10 * mib},
		Sampler: &fakeSampler{use: map[string]Usage{}},
		Host: func() (Host, error) {
			reads++
			return Host{MemTotal: gib, MemAvailable: gib, DiskTotal: gib, DiskFree: free}, nil
		},
	})
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	need := Need{Usage: Usage{Disk: mib}}
	if _, ref := c.Admit(need); ref == nil || ref.Resource != Disk || ref.Scope != "host" {
		t.Fatalf("full disk: %v", ref)
	}
	free = 500 * mib // freed since the last sample
	r, ref := c.Admit(need)
	if ref != nil {
		t.Fatalf("freed disk: %v", ref)
	}
	r.Cancel()
	if reads != 3 {
		t.Errorf("%d host reads, want 3 (the sample and one per host refusal)", reads)
	}
}
