package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

// TestBuildBoxes: a build's sandbox boots like any other but is its
// build's alone: no lookup, list, kill or owner check of a caller reaches
// it, and its Close tears it down.
func TestBuildBoxes(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	boxes := NewBuildBoxes(w.svc)
	spec := BuildBoxSpec{Template: "t1", Image: "img-1", Root: w.root, Timeout: time.Minute,
		Limits: runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 256, MaxProcs: 256}}
	if _, err := boxes.StartBuildBox(ctx, spec); err == nil {
		t.Fatal("a build box without a build started")
	}
	spec.Build = "b1"
	box, err := boxes.StartBuildBox(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	w.accounted(box.ID)
	if n := w.svc.Running(); n != 1 {
		t.Errorf("Running = %d, want the build box", n)
	}
	targets := NewTargets(w.svc)
	for name, call := range map[string]func() error{
		"Get":    func() error { _, err := w.svc.Get(ctx, box.ID); return err },
		"Kill":   func() error { return w.svc.Kill(ctx, box.ID) },
		"Target": func() error { _, err := targets.Target(box.ID); return err },
		"Agent":  func() error { _, err := targets.Agent(box.ID); return err },
		"Pause":  func() error { _, err := w.svc.Checkpoints().Pause(ctx, box.ID, PauseOptions{}); return err },
	} {
		if err := call(); errdefs.Class(err) != errdefs.ErrNotFound {
			t.Errorf("%s of a build box: %v, want not_found", name, err)
		}
	}
	if sbs, err := w.svc.List(ctx, ListFilter{}); err != nil || len(sbs) != 0 {
		t.Errorf("List = %v (%v), want no sandbox", sbs, err)
	}
	if _, known := w.svc.Owner(ctx, box.ID); known {
		t.Error("a build box has an owner")
	}
	box.Close(ctx)
	w.accounted()
}
