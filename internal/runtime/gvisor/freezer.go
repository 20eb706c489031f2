package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.IdleFreezer = (*Runtime)(nil)

// The idle freezer (runtime.IdleFreezer) is the kernel's cgroup freezer over
// the cgroup runsc made for the sandbox, which holds its sentry, gofer and
// stubs: cgroup v1's freezer.state, v2's cgroup.freeze. A frozen sandbox
// takes no CPU at all; its netstack, timers and guest processes stand still
// and go on where they were when thawed (the guest's clock then shows the
// real time).
//
// The sandbox is paused by runsc (its tasks stopped inside the sentry)
// before its cgroup is frozen, and resumed after the thaw. Freezing a
// running one kills it now and then: the freezer interrupts the systrap
// stubs' syscall threads, which wait in seccomp user notifications, and a
// notification the sentry was waiting to receive while a stub system call
// was in flight is withdrawn; the sentry gets ENOENT, takes the stub for
// dead and kills it, and the sandbox dies ("systrap corrupted memory:
// subprocess died"; about one freeze in twenty in a loop of wakes and
// execs, 2026-12-02). Paused, the sentry has no stub call in flight. runsc
// says "paused" of a sandbox at rest: State reports it running.

// freezeWait bounds how long a freeze waits for every task to stop (v1
// answers FREEZING while one is in an uninterruptible sleep).
const freezeWait = 5 * time.Second

// freezer is how sandbox id's cgroup is frozen: the file and the values
// that freeze and thaw it, and where to read whether it is frozen.
type freezer struct {
	file, frozen, thawed string
	// state is read back: v1 freezer.state itself, v2 cgroup.events'
	// "frozen 1" line.
	state func() (bool, error)
}

func freezerOf(id string) (freezer, error) {
	if !idPattern.MatchString(id) {
		return freezer{}, errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	v1 := filepath.Join(cgroupRoot, "freezer", cgroupParent, id, "freezer.state")
	if exists(v1) {
		return freezer{file: v1, frozen: "FROZEN", thawed: "THAWED", state: func() (bool, error) {
			b, err := os.ReadFile(v1)
			return strings.TrimSpace(string(b)) == "FROZEN", err
		}}, nil
	}
	dir := filepath.Join(cgroupRoot, cgroupParent, id)
	if exists(filepath.Join(dir, "cgroup.freeze")) {
		return freezer{file: filepath.Join(dir, "cgroup.freeze"), frozen: "1", thawed: "0", state: func() (bool, error) {
			m, err := readStat(filepath.Join(dir, "cgroup.events"))
			return m["frozen"] == 1, err
		}}, nil
	}
	return freezer{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s has no freezer cgroup", id)
}

// FreezeIdle freezes sandbox id's cgroup and waits until it is frozen; if
// it cannot be, it thaws it again and fails (a half-frozen sandbox would
// neither run nor rest).
func (r *Runtime) FreezeIdle(ctx context.Context, id string) error {
	f, err := freezerOf(id)
	if err != nil {
		return err
	}
	if err := r.Freeze(ctx, id); err != nil {
		return err
	}
	if err := os.WriteFile(f.file, []byte(f.frozen), 0o644); err != nil {
		return errors.Join(fmt.Errorf("freeze %s: %w", id, err), r.Thaw(context.WithoutCancel(ctx), id))
	}
	deadline := time.Now().Add(freezeWait)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		done, err := f.state()
		if err == nil && done {
			return nil
		}
		if err != nil || time.Now().After(deadline) || ctx.Err() != nil {
			os.WriteFile(f.file, []byte(f.thawed), 0o644)
			return errors.Join(fmt.Errorf("freeze %s: not frozen within %s", id, freezeWait), err, ctx.Err(),
				r.Thaw(context.WithoutCancel(ctx), id))
		}
		time.Sleep(wait)
	}
}

// ThawIdle thaws sandbox id's cgroup and resumes it if runsc holds it
// paused (a no-op on one that is neither).
func (r *Runtime) ThawIdle(ctx context.Context, id string) error {
	f, err := freezerOf(id)
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.file, []byte(f.thawed), 0o644); err != nil {
		return fmt.Errorf("thaw %s: %w", id, err)
	}
	if r.runscPaused(id) {
		return r.Thaw(ctx, id)
	}
	return nil
}

// runscPaused reports whether runsc's state file says sandbox id is paused.
func (r *Runtime) runscPaused(id string) bool {
	data, err := os.ReadFile(r.stateFile(id))
	var st runscState
	return err == nil && json.Unmarshal(data, &st) == nil && st.Status == "paused"
}

// idleFrozen reports whether sandbox id's cgroup is frozen, false if it
// has no freezer.
func idleFrozen(id string) bool {
	f, err := freezerOf(id)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(f.file)
	return err == nil && strings.TrimSpace(string(b)) != f.thawed
}

// IdleFrozen reports whether sandbox id's cgroup is frozen (or freezing).
func (r *Runtime) IdleFrozen(_ context.Context, id string) (bool, error) {
	f, err := freezerOf(id)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(f.file)
	if err != nil {
		return false, fmt.Errorf("read the freezer of %s: %w", id, err)
	}
	return strings.TrimSpace(string(b)) != f.thawed, nil
}

// thawForTeardown thaws a frozen sandbox before runsc is asked to stop or
// delete it: a frozen sentry answers no request, and a cgroup v1 frozen
// task does not die of SIGKILL until it is thawed. A sandbox without a
// freezer cgroup (already gone, or none made) needs nothing.
func (r *Runtime) thawForTeardown(ctx context.Context, id string) {
	if idleFrozen(id) {
		r.ThawIdle(ctx, id)
	}
}
