package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.IdleFreezer = (*Runtime)(nil)

// The idle freezer (runtime.IdleFreezer) is the kernel's cgroup freezer
// (cgroup v1 freezer.state, v2 cgroup.freeze) over the sandbox's sentry and
// gofer, which it moves into a child cgroup of the sandbox's own, restDir:
// frozen, the sandbox takes no CPU at all; its netstack, timers and guest
// processes stand still and go on where they were when thawed (the guest's
// clock then shows the real time).
//
// The systrap stub processes are left out, in the sandbox's cgroup. They
// run nothing unless the sentry asks, so with the sentry frozen they are
// asleep anyway; but freezing them interrupts their syscall threads, which
// wait in seccomp user notifications, and after two such interruptions
// without a request in between, the listener's count of notifications runs
// ahead of the notifications: a later SECCOMP_IOCTL_NOTIF_RECV gets
// ENOENT, the sentry takes the stub for dead and kills it, and the
// sandbox dies ("systrap corrupted memory: subprocess died"). Freezing the
// whole cgroup killed about one sandbox in twenty to a hundred freeze and
// exec cycles (2026-12-02, runsc 20260905); pausing it with runsc first
// did not help. Each freeze moves any process but the sentry and gofer
// back out of restDir (a stub the sentry started there), so no stub is
// frozen twice.

// freezeWait bounds how long a freeze waits for every task to stop (v1
// answers FREEZING while one is in an uninterruptible sleep).
const freezeWait = 5 * time.Second

// restCgroup names the child cgroup that holds the sentry and gofer.
const restCgroup = "rest"

// freezer is where sandbox id is frozen: the sandbox's cgroup in the
// freezer hierarchy (parent), its child that holds the sentry and gofer
// (dir), the file and values that freeze and thaw it, and how to read
// whether it is frozen.
type freezer struct {
	parent, dir          string
	file, frozen, thawed string
	state                func() (bool, error)
}

func freezerOf(id string) (freezer, error) {
	if !idPattern.MatchString(id) {
		return freezer{}, errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	if parent := filepath.Join(cgroupRoot, "freezer", cgroupParent, id); exists(parent) {
		dir := filepath.Join(parent, restCgroup)
		file := filepath.Join(dir, "freezer.state")
		return freezer{parent: parent, dir: dir, file: file, frozen: "FROZEN", thawed: "THAWED", state: func() (bool, error) {
			b, err := os.ReadFile(file)
			return strings.TrimSpace(string(b)) == "FROZEN", err
		}}, nil
	}
	if parent := filepath.Join(cgroupRoot, cgroupParent, id); exists(filepath.Join(parent, "cgroup.freeze")) {
		dir := filepath.Join(parent, restCgroup)
		return freezer{parent: parent, dir: dir, file: filepath.Join(dir, "cgroup.freeze"), frozen: "1", thawed: "0", state: func() (bool, error) {
			m, err := readStat(filepath.Join(dir, "cgroup.events"))
			return m["frozen"] == 1, err
		}}, nil
	}
	return freezer{}, errdefs.New(errdefs.ErrNotFound, "sandbox %s has no freezer cgroup", id)
}

// FreezeIdle moves the sandbox's sentry and gofer into its rest cgroup
// (and anything else there back out), freezes that and waits until it is
// frozen; if it cannot be, it thaws it again and fails (a half-frozen
// sandbox would neither run nor rest).
func (r *Runtime) FreezeIdle(ctx context.Context, id string) error {
	f, err := freezerOf(id)
	if err != nil {
		return err
	}
	if err := r.gather(f, id); err != nil {
		return fmt.Errorf("freeze %s: %w", id, err)
	}
	if err := os.WriteFile(f.file, []byte(f.frozen), 0o644); err != nil {
		return fmt.Errorf("freeze %s: %w", id, err)
	}
	deadline := time.Now().Add(freezeWait)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		done, err := f.state()
		if err == nil && done {
			return nil
		}
		if err != nil || time.Now().After(deadline) || ctx.Err() != nil {
			os.WriteFile(f.file, []byte(f.thawed), 0o644)
			return errors.Join(fmt.Errorf("freeze %s: not frozen within %s", id, freezeWait), err, ctx.Err())
		}
		time.Sleep(wait)
	}
}

// gather puts the sentry and gofer of sandbox id in f's rest cgroup, made
// if need be, and moves every other process there back to the sandbox's
// cgroup.
func (r *Runtime) gather(f freezer, id string) error {
	st, err := r.readState(id)
	if err != nil {
		return err
	}
	if st.Sandbox.Pid <= 0 {
		return fmt.Errorf("runsc's state names no sandbox process")
	}
	if err := os.Mkdir(f.dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	keep := map[int]bool{st.Sandbox.Pid: true, st.GoferPid: st.GoferPid > 0}
	procs, err := os.ReadFile(filepath.Join(f.dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, field := range strings.Fields(string(procs)) {
		if pid, _ := strconv.Atoi(field); !keep[pid] {
			moveProc(f.parent, pid) // a stub born there; gone is fine
		}
	}
	for pid, ok := range keep {
		if ok {
			if err := moveProc(f.dir, pid); err != nil {
				return fmt.Errorf("move process %d to the rest cgroup: %w", pid, err)
			}
		}
	}
	return nil
}

// moveProc moves process pid (all its threads) into cgroup dir; a process
// that has exited is not an error.
func moveProc(dir string, pid int) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// ThawIdle thaws sandbox id's rest cgroup (a no-op on one that is not
// frozen), and resumes it if runsc holds it paused.
func (r *Runtime) ThawIdle(ctx context.Context, id string) error {
	f, err := freezerOf(id)
	if err != nil {
		return err
	}
	if exists(f.dir) {
		if err := os.WriteFile(f.file, []byte(f.thawed), 0o644); err != nil {
			return fmt.Errorf("thaw %s: %w", id, err)
		}
	}
	if st, err := r.readState(id); err == nil && st.Status == "paused" {
		// A pause (runsc) never resumed because spaced died: it goes on.
		return r.Thaw(ctx, id)
	}
	return nil
}

// IdleFrozen reports whether sandbox id's rest cgroup is frozen (or
// freezing).
func (r *Runtime) IdleFrozen(_ context.Context, id string) (bool, error) {
	f, err := freezerOf(id)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile(f.file)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the freezer of %s: %w", id, err)
	}
	return strings.TrimSpace(string(b)) != f.thawed, nil
}

func (r *Runtime) readState(id string) (runscState, error) {
	var st runscState
	data, err := os.ReadFile(r.stateFile(id))
	if err != nil {
		return st, fmt.Errorf("read runsc state: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("parse runsc state of %s: %w", id, err)
	}
	return st, nil
}

// releaseRest readies a sandbox for runsc to stop or delete it: a frozen
// one is thawed (a frozen sentry answers no request, and a cgroup v1 frozen
// task does not die of SIGKILL until it is thawed), and the rest cgroup is
// emptied into the sandbox's own and removed: runsc removes the cgroups it
// made, and with a child cgroup left in one it retried that for 5 s on
// every delete of a sandbox that had ever rested (a kill, a pause, a
// hibernation). A sandbox without a freezer cgroup (already gone, or none
// made) needs nothing.
func (r *Runtime) releaseRest(ctx context.Context, id string) {
	f, err := freezerOf(id)
	if err != nil || !exists(f.dir) {
		return
	}
	if frozen, err := r.IdleFrozen(ctx, id); err == nil && frozen {
		r.ThawIdle(ctx, id)
	}
	if procs, err := os.ReadFile(filepath.Join(f.dir, "cgroup.procs")); err == nil {
		for _, field := range strings.Fields(string(procs)) {
			if pid, _ := strconv.Atoi(field); pid > 0 {
				moveProc(f.parent, pid)
			}
		}
	}
	syscall.Rmdir(f.dir)
}
