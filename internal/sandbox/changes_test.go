package sandbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// TestFeed: Feed on a store alone. It follows the records written after
// ChangesNow, leaving out pool and build sandboxes (their changes still
// move next on), says which record was removed, and on a store that keeps
// no changes answers unavailable.
func TestFeed(t *testing.T) {
	ctx := context.Background()
	bolt, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	if _, err := NewFeed(bolt).ChangesNow(); errdefs.Class(err) != errdefs.ErrUnavailable {
		t.Errorf("ChangesNow on a store without changes: %v, want unavailable", err)
	}
	st := store.Watch(bolt)
	feed := NewFeed(st)
	from, err := feed.ChangesNow()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, rec := range []*store.Sandbox{
		{ID: "pooled", State: store.StatePooled, CreatedAt: now},
		{ID: "build", State: store.StateRunning, Build: "b1", CreatedAt: now},
		{ID: "mine", State: store.StateCreating, CreatedAt: now},
	} {
		if err := st.CreateSandbox(ctx, rec, 8, nil); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := st.GetSandbox(ctx, "mine")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSandbox(ctx, "mine", store.Was(mine)); err != nil {
		t.Fatal(err)
	}
	changes, next, reset, err := feed.Changes(ctx, from)
	if err != nil || reset {
		t.Fatalf("Changes: %v, reset %v", err, reset)
	}
	if len(changes) != 2 || changes[0].Sandbox.ID != "mine" || changes[0].Removed || changes[1].Sandbox.ID != "mine" || !changes[1].Removed {
		t.Fatalf("changes = %+v, want mine made and removed only", changes)
	}
	last, _ := feed.ChangesNow()
	if next != last || next != changes[1].Seq {
		t.Errorf("next = %d, want the last change %d", next, last)
	}
	// A seq older than what is kept: the caller lists again.
	if got, n, reset, err := feed.Changes(ctx, 1); err != nil || !reset || len(got) != 0 || n != 1 {
		t.Errorf("Changes after a seq never kept: %v, next %d, reset %v (%v); want a reset", got, n, reset, err)
	}
}
