package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	if err := b.UpdateSandbox(ctx, a, Expect{State: StateRunning}); err != nil {
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
	if err := b2.DeleteSandbox(ctx, "c", Expect{State: StateRunning}); err != nil {
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
		if err := st.UpdateSandbox(ctx, s, Expect{State: StateRunning}); err != nil {
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
			if err := st.UpdateSandbox(ctx, s, Expect{State: StateRunning}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
