package gvisor

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.Checkpointer = (*Runtime)(nil)

func (r *Runtime) Freeze(ctx context.Context, id string) error {
	if _, err := r.run(ctx, append(r.savedFlags(id), "pause", id)...); err != nil {
		return fmt.Errorf("freeze %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) Thaw(ctx context.Context, id string) error {
	if _, err := r.run(ctx, append(r.savedFlags(id), "resume", id)...); err != nil {
		return fmt.Errorf("thaw %s: %w", id, err)
	}
	return nil
}

// Checkpoint runs runsc checkpoint. The image holds the sandbox's memory
// (its writable layer included: the overlay's upper layer is a gVisor tmpfs
// whose pages are saved with the rest). Without leaveRunning runsc stops the
// sandbox, but its state file says "running" for a while after; Checkpoint
// returns once the sandbox is really stopped.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	args := append(r.savedFlags(id), "checkpoint", "--exclude-committed-zero-pages", "--image-path", dir)
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	if _, err := r.run(ctx, append(args, id)...); err != nil {
		return checkpointError(err, "checkpoint")
	}
	if leaveRunning {
		return nil
	}
	for {
		st, err := r.State(ctx, id)
		if err != nil || (st != runtime.StateRunning && st != runtime.StatePaused) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("checkpoint %s: waiting for the sandbox to stop: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkpointError classifies a failed checkpoint: a full disk is the
// caller's to report as such.
func checkpointError(err error, what string) error {
	if strings.Contains(err.Error(), "no space left") {
		return errdefs.Wrap(errdefs.ErrNoSpace, err, "no space left on the node for the %s", what)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox engine could not take the %s", what)
}

func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, dir string) error {
	return r.make(ctx, spec, func(flags []string, bundle string) error {
		args := append(append([]string{}, flags...), "restore", "--detach", "--background", "--bundle", bundle, "--image-path", dir, spec.ID)
		if err := r.runDetached(ctx, "restore", r.logFile(spec.ID), spec.Priority, args...); err != nil {
			return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox engine could not restore the checkpoint")
		}
		return nil
	})
}

func (r *Runtime) SnapshotDisk(ctx context.Context, id, dir string) error {
	if _, err := r.run(ctx, append(r.savedFlags(id), "fscheckpoint", "--leave-running", "--image-path", dir, id)...); err != nil {
		return checkpointError(err, "disk snapshot")
	}
	return nil
}

// Version is the first line of runsc --version ("runsc version <build>").
func (r *Runtime) Version() string {
	r.versionOnce.Do(func() {
		out, err := exec.Command(r.cfg.Runsc, "--version").Output()
		if err != nil {
			r.version = "unknown"
			return
		}
		r.version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	})
	return r.version
}
