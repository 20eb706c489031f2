package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func openTest(t *testing.T) (*Bolt, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	b, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, path
}

func TestSlotsNeverCollideUnderConcurrency(t *testing.T) {
	b, _ := openTest(t)
	ctx := context.Background()
	const n = 64
	var wg sync.WaitGroup
	slots := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &Sandbox{ID: fmt.Sprintf("sb%02d", i), State: StateCreating}
			if err := b.CreateSandbox(ctx, s, 1000, nil); err != nil {
				t.Error(err)
				return
			}
			slots <- s.Slot
		}()
	}
	wg.Wait()
	close(slots)
	seen := map[int]bool{}
	for s := range slots {
		if seen[s] {
			t.Fatalf("slot %d given twice", s)
		}
		seen[s] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d slots, want %d", len(seen), n)
	}
}

func TestSlotLifecycleSurvivesReopen(t *testing.T) {
	b, path := openTest(t)
	ctx := context.Background()
	a := &Sandbox{ID: "a", State: StateRunning}
	c := &Sandbox{ID: "c", State: StateRunning}
	for _, s := range []*Sandbox{a, c} {
		if err := b.CreateSandbox(ctx, s, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.CreateSandbox(ctx, &Sandbox{ID: "d"}, 2, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third create with 2 slots: %v", err)
	}
	if err := b.CreateSandbox(ctx, &Sandbox{ID: "a"}, 2, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	a.State = StateKilled
	if err := b.UpdateSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.Slot != -1 {
		t.Fatalf("killed sandbox keeps slot %d", a.Slot)
	}
	b.Close()

	b2, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	e := &Sandbox{ID: "e"}
	if err := b2.CreateSandbox(ctx, e, 2, nil); err != nil {
		t.Fatal(err)
	}
	if e.Slot != 0 {
		t.Fatalf("freed slot 0 not reused after reopen: got %d", e.Slot)
	}
	got, err := b2.GetSandbox(ctx, "c")
	if err != nil || got.Slot != 1 || got.State != StateRunning {
		t.Fatalf("record after reopen: %+v, %v", got, err)
	}
	if _, err := b2.GetSandbox(ctx, "zz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := b2.DeleteSandbox(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	f := &Sandbox{ID: "f"}
	if err := b2.CreateSandbox(ctx, f, 2, nil); err != nil || f.Slot != 1 {
		t.Fatalf("slot of deleted record not freed: %d %v", f.Slot, err)
	}
}

// BenchmarkUpdate measures one durable write (a commit and its fsync).
func BenchmarkUpdate(b *testing.B) {
	st, err := OpenBolt(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	s := &Sandbox{ID: "bench", State: StateRunning}
	if err := st.CreateSandbox(ctx, s, 10, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := st.UpdateSandbox(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateParallel shows the batching: concurrent writers share commits.
func BenchmarkUpdateParallel(b *testing.B) {
	st, err := OpenBolt(filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		s := &Sandbox{ID: fmt.Sprintf("bench%d", n.Add(1)), State: StateRunning}
		if err := st.CreateSandbox(ctx, s, 1000, nil); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := st.UpdateSandbox(ctx, s); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func TestSlotAvoid(t *testing.T) {
	b, _ := openTest(t)
	ctx := context.Background()
	avoid := func(slot int) bool { return slot == 0 || slot == 2 }
	var got []int
	for _, id := range []string{"a", "b", "c"} {
		s := &Sandbox{ID: id, State: StateRunning}
		if err := b.CreateSandbox(ctx, s, 10, avoid); err != nil {
			t.Fatal(err)
		}
		got = append(got, s.Slot)
	}
	if fmt.Sprint(got) != "[1 3 4]" {
		t.Fatalf("slots %v, want [1 3 4] (0 and 2 avoided)", got)
	}
	if err := b.CreateSandbox(ctx, &Sandbox{ID: "d"}, 2, func(int) bool { return true }); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("every slot avoided: %v", err)
	}
}

func TestReviveSandbox(t *testing.T) {
	b, _ := openTest(t)
	ctx := context.Background()
	a := &Sandbox{ID: "a", State: StateRunning}
	if err := b.CreateSandbox(ctx, a, 4, nil); err != nil {
		t.Fatal(err)
	}
	a.State = StatePaused
	if err := b.UpdateSandbox(ctx, a); err != nil || a.Slot != -1 {
		t.Fatalf("pause: slot %d, err %v", a.Slot, err)
	}
	for _, tc := range []struct {
		name    string
		rec     Sandbox
		wantErr bool
	}{
		{"not live", Sandbox{ID: "a", State: StatePaused}, true},
		{"unknown", Sandbox{ID: "zz", State: StateResuming}, true},
		{"paused to resuming", Sandbox{ID: "a", State: StateResuming}, false},
		{"already live", Sandbox{ID: "a", State: StateResuming}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			err := b.ReviveSandbox(ctx, &rec, 4, nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ReviveSandbox = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && rec.Slot != 0 {
				t.Fatalf("slot = %d, want 0", rec.Slot)
			}
		})
	}
}

func TestTemplatesAndBuilds(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing template: %v", err)
	}
	bd := &Build{ID: "b1", Template: "app", State: BuildQueued, Tags: []string{"default"}}
	if err := b.PutBuild(ctx, bd, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a build alone made its template: %v", err)
	}
	bd.State = BuildReady
	tpl := &Template{Name: "app", Tags: map[string]TemplateTag{"default": {Build: "b1"}}}
	if err := b.PutBuild(ctx, bd, tpl); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetTemplate(ctx, "app")
	if err != nil || got.Tags["default"].Build != "b1" {
		t.Fatalf("template = %+v, %v", got, err)
	}
	gb, err := b.GetBuild(ctx, "b1")
	if err != nil || gb.State != BuildReady || !gb.Final() {
		t.Fatalf("build = %+v, %v", gb, err)
	}
	ts, _ := b.ListTemplates(ctx)
	bs, _ := b.ListBuilds(ctx)
	if len(ts) != 1 || len(bs) != 1 {
		t.Fatalf("lists: %d templates, %d builds", len(ts), len(bs))
	}
	if err := b.DeleteTemplate(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted template: %v", err)
	}
}
