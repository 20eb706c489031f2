package runtimetest

import (
	"testing"

	"github.com/spacesandbox/space/internal/runtime"
)

// runCheckpoint checks a driver's Checkpointer, when it has one: freeze
// and thaw, a checkpoint that leaves the sandbox running, and restores of
// that image into new sandboxes (a fork), a stopping checkpoint and a
// restore under the same id (a pause and resume), all cleaned up by Destroy.
func runCheckpoint(t *testing.T, h Harness) {
	r := h.New(t)
	cp, ok := r.(runtime.Checkpointer)
	if !ok || !r.Capabilities().Checkpoint {
		t.Skip("the runtime does not checkpoint")
	}
	if cp.Version() == "" {
		t.Error("Version is empty: checkpoints could not name what restores them")
	}
	ctx := ctxT(t)
	id := NewID()
	spec := h.Spec(t, id)
	if err := r.Run(ctx, spec); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() { r.Destroy(ctxT(t), id) })

	if err := cp.Freeze(ctx, id); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	mustState(t, r, id, runtime.StatePaused)
	if err := cp.Thaw(ctx, id); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	mustState(t, r, id, runtime.StateRunning)

	fork := t.TempDir()
	if err := cp.Checkpoint(ctx, id, fork, true); err != nil {
		t.Fatalf("Checkpoint leaving it running: %v", err)
	}
	mustState(t, r, id, runtime.StateRunning)
	for range 2 {
		child := NewID()
		if err := cp.Restore(ctx, h.Spec(t, child), fork); err != nil {
			t.Fatalf("Restore into a new sandbox: %v", err)
		}
		mustState(t, r, child, runtime.StateRunning)
		if err := r.Destroy(ctx, child); err != nil {
			t.Fatalf("Destroy restored: %v", err)
		}
		if left := h.Leftovers(t, child); len(left) > 0 {
			t.Errorf("restored sandbox left %v", left)
		}
	}

	paused := t.TempDir()
	if err := cp.Checkpoint(ctx, id, paused, false); err != nil {
		t.Fatalf("Checkpoint stopping it: %v", err)
	}
	if st, _ := r.State(ctx, id); st == runtime.StateRunning || st == runtime.StatePaused {
		t.Fatalf("after a stopping checkpoint the sandbox is %s", st)
	}
	if err := r.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := cp.Restore(ctx, spec, paused); err != nil {
		t.Fatalf("Restore under the same id: %v", err)
	}
	mustState(t, r, id, runtime.StateRunning)

	// A disk snapshot of a running sandbox, and a sandbox made from it.
	disk := t.TempDir()
	if err := cp.SnapshotDisk(ctx, id, disk); err != nil {
		t.Fatalf("SnapshotDisk: %v", err)
	}
	mustState(t, r, id, runtime.StateRunning)
	from := NewID()
	fspec := h.Spec(t, from)
	fspec.DiskImage = disk
	if err := r.Run(ctx, fspec); err != nil {
		t.Fatalf("Run from a disk snapshot: %v", err)
	}
	t.Cleanup(func() { r.Destroy(ctxT(t), from) })
	mustState(t, r, from, runtime.StateRunning)
}
