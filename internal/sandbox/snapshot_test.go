package sandbox

import (
	"context"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// TestSnapshots: Snapshots on its own, over the fakes and a real object
// store. A named snapshot replaces the older one of its name and tag; a
// tenant sees, gets and deletes only its own; a create starts from a disk
// snapshot (a fresh boot on its disk) or a full one (its processes, with a
// token of its own); a deleted snapshot is gone.
func TestSnapshots(t *testing.T) {
	w := newWorld(t, worldOptions{checkpoints: true})
	alice := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "alice"})
	bob := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "bob"})
	snaps := w.svc.Snapshots()
	sb, err := w.svc.Create(alice, CreateRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := snaps.TakeSnapshot(alice, sb.ID, SnapshotOptions{Name: "Work"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := snaps.TakeSnapshot(alice, sb.ID, SnapshotOptions{Name: "work:default"})
	if err != nil {
		t.Fatal(err)
	}
	if second.Ref() != "work:default" || second.Tenant != "alice" || second.Memory {
		t.Errorf("second snapshot: %+v, want a disk snapshot work:default of alice", second)
	}
	if got, err := snaps.Snapshots(alice, SnapshotFilter{SandboxID: sb.ID}); err != nil || len(got) != 1 || got[0].ID != second.ID {
		t.Errorf("alice's snapshots of %s: %v (%v), want only %s (the first replaced)", sb.ID, got, err, second.ID)
	}
	if got, err := snaps.GetSnapshot(alice, "work"); err != nil || got.ID != second.ID {
		t.Errorf("GetSnapshot(work): %v (%v), want %s", got, err, second.ID)
	}
	if _, err := snaps.GetSnapshot(alice, first.ID); errdefs.Class(err) != errdefs.ErrNotFound {
		t.Errorf("the replaced snapshot: %v, want not_found", err)
	}

	// Another tenant: nothing of alice's, by name or by id.
	for name, call := range map[string]func() error{
		"get by name": func() error { _, err := snaps.GetSnapshot(bob, "work"); return err },
		"get by id":   func() error { _, err := snaps.GetSnapshot(bob, second.ID); return err },
		"delete":      func() error { _, err := snaps.DeleteSnapshot(bob, "work"); return err },
		"create from": func() error { _, err := w.svc.Create(bob, CreateRequest{Snapshot: second.ID}); return err },
	} {
		if err := call(); errdefs.Class(err) != errdefs.ErrNotFound {
			t.Errorf("bob, %s: %v, want not_found", name, err)
		}
	}
	if got, err := snaps.Snapshots(bob, SnapshotFilter{}); err != nil || len(got) != 0 {
		t.Errorf("bob's snapshots: %v (%v), want none", got, err)
	}

	fromDisk, err := w.svc.Create(alice, CreateRequest{Snapshot: "work"})
	if err != nil {
		t.Fatal(err)
	}
	full, err := snaps.TakeSnapshot(alice, sb.ID, SnapshotOptions{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	fromFull, err := w.svc.Create(alice, CreateRequest{Snapshot: full.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !full.Memory || fromFull.AccessToken == "" || fromFull.AccessToken == sb.AccessToken {
		t.Errorf("a create from full snapshot %+v got token %q (the parent's %q), want a token of its own", full, fromFull.AccessToken, sb.AccessToken)
	}

	if n, err := snaps.DeleteSnapshot(alice, "work"); err != nil || n != 1 {
		t.Errorf("DeleteSnapshot(work): %d (%v), want 1", n, err)
	}
	if _, err := snaps.GetSnapshot(alice, "work"); errdefs.Class(err) != errdefs.ErrNotFound {
		t.Errorf("a deleted snapshot: %v, want not_found", err)
	}
	if err := w.svc.Kill(alice, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := snaps.TakeSnapshot(alice, sb.ID, SnapshotOptions{}); errdefs.Class(err) != errdefs.ErrNotFound {
		t.Errorf("a snapshot of a killed sandbox: %v, want not_found", err)
	}
	w.accounted(fromDisk.ID, fromFull.ID)
}
