package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestCheckpointsWithoutObjectStore: on a node with no object store every
// call of Checkpoints says so (failed_precondition) and changes nothing:
// the sandbox runs on, with nothing more on the host.
func TestCheckpointsWithoutObjectStore(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	sb, err := w.svc.Create(ctx, CreateRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	ck := w.svc.Checkpoints()
	for name, call := range map[string]func() error{
		"Pause":          func() error { _, err := ck.Pause(ctx, sb.ID, PauseOptions{}); return err },
		"Pause disk":     func() error { _, err := ck.Pause(ctx, sb.ID, PauseOptions{DiskOnly: true}); return err },
		"Resume":         func() error { _, err := ck.Resume(ctx, sb.ID, time.Minute); return err },
		"Resume unknown": func() error { _, err := ck.Resume(ctx, "nobody", time.Minute); return err },
		"Fork":           func() error { _, err := ck.Fork(ctx, sb.ID, ForkRequest{Count: 2}); return err },
	} {
		if err := call(); errdefs.Class(err) != errdefs.ErrFailedPrecondition {
			t.Errorf("%s: %v, want failed_precondition", name, err)
		}
	}
	got, err := w.svc.Get(ctx, sb.ID)
	if err != nil || got.State != StateRunning {
		t.Errorf("after the refused calls the sandbox is %+v (%v), want running", got, err)
	}
	w.accounted(sb.ID)
}
