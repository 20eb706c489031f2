// Package fakeruntime is an in-memory runtime.Runtime for unit tests of the
// layers above it (internal/sandbox): no processes, no root, no runsc. A
// sandbox is an entry in a table with a state; a checkpoint or disk
// snapshot is a small file in the image directory naming what it holds.
// Every operation can be made to fail (Fail), a sandbox can die under the
// caller (Kill), and a Boot hook runs whatever should answer for the
// sandbox (an agent stand-in) from its start to its stop.
//
// It passes the parts of internal/runtime/runtimetest that apply to a
// runtime without processes (see fakeruntime_test.go); it is never the
// proof that a feature works on a real engine.
package fakeruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

// Op names an operation that Fail can make fail.
type Op string

const (
	OpCreate       Op = "create"
	OpStart        Op = "start"
	OpStop         Op = "stop"
	OpDestroy      Op = "destroy"
	OpState        Op = "state"
	OpList         Op = "list"
	OpFreeze       Op = "freeze"
	OpThaw         Op = "thaw"
	OpCheckpoint   Op = "checkpoint"
	OpRestore      Op = "restore"
	OpSnapshotDisk Op = "snapshot-disk"
	OpForeground   Op = "foreground"
	OpResize       Op = "resize"
)

// Boot is what the Boot hook is told about a sandbox that starts.
type Boot struct {
	Spec runtime.Spec
	// From is the spec of the sandbox whose checkpoint was restored;
	// nil for a sandbox started from its image.
	From *runtime.Spec
}

// Options of a fake runtime.
type Options struct {
	// Boot, when set, runs when a sandbox starts (Start or Restore) and
	// returns what stops whatever it started (called at Stop, Destroy, a
	// stopping Checkpoint and Kill). An error fails the start and leaves
	// the sandbox stopped.
	Boot func(Boot) (stop func(), err error)
}

// image is what a checkpoint or disk snapshot file holds.
type image struct {
	Kind string       `json:"kind"` // "memory" or "disk"
	Spec runtime.Spec `json:"spec"`
}

const imageFile = "fake-image.json"

type sandbox struct {
	spec     runtime.Spec
	state    runtime.State
	from     *runtime.Spec
	stop     func()
	priority int
	madeAt   int // the priority it was made (created or restored) at
	reason   string
}

// host is the runtime's state, shared by every instance made by Reopen (as
// runsc's state directory outlives spaced).
type host struct {
	mu    sync.Mutex
	boxes map[string]*sandbox
	fail  map[Op]func(id string) error
	calls []Call
}

// Call is one operation asked of the runtime, with its id.
type Call struct {
	Op Op
	ID string
}

// Runtime is the fake. Safe for concurrent use.
type Runtime struct {
	opts Options
	h    *host
}

// Priorities a sandbox has: Spec.Priority background makes it at Low,
// urgent at High, and Foreground sets Normal.
const (
	Low    = 2
	Normal = 1024
	High   = 8192
)

// New returns a fake runtime holding no sandboxes.
func New(opts Options) *Runtime {
	return &Runtime{opts: opts, h: &host{boxes: map[string]*sandbox{}, fail: map[Op]func(string) error{}}}
}

// Reopen returns a second instance over the same sandboxes, as a driver
// made again after a daemon restart sees what the first one made.
func (r *Runtime) Reopen(opts Options) *Runtime { return &Runtime{opts: opts, h: r.h} }

// Fail makes every later op fail with what f returns for the sandbox's id
// (nil: the op runs); f nil makes op run again. A failing op changes
// nothing.
func (r *Runtime) Fail(op Op, f func(id string) error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if f == nil {
		delete(r.h.fail, op)
		return
	}
	r.h.fail[op] = f
}

// FailOnce makes the next op (of any id) fail with err, and later ones run.
func (r *Runtime) FailOnce(op Op, err error) {
	var once sync.Once
	r.Fail(op, func(string) error {
		var out error
		once.Do(func() { out = err })
		return out
	})
}

// Calls returns the operations asked so far, in order.
func (r *Runtime) Calls() []Call {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	return slices.Clone(r.h.calls)
}

// Kill makes sandbox id die on its own (out of memory, killed on the
// host): it stops, and ExitReason says reason.
func (r *Runtime) Kill(id, reason string) {
	r.h.mu.Lock()
	b := r.h.boxes[id]
	var stop func()
	if b != nil {
		b.state, b.reason = runtime.StateStopped, reason
		stop, b.stop = b.stop, nil
	}
	r.h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Priority is sandbox id's CPU priority (Low, Normal or High); 0 if
// unknown.
func (r *Runtime) Priority(id string) int {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if b := r.h.boxes[id]; b != nil {
		return b.priority
	}
	return 0
}

// MadeAt is the CPU priority sandbox id was created or restored at; 0 if
// unknown.
func (r *Runtime) MadeAt(id string) int {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if b := r.h.boxes[id]; b != nil {
		return b.madeAt
	}
	return 0
}

// Leftovers is what the fake still holds for id: its entry, and a
// running Boot hook. The fake has nothing on the host.
func (r *Runtime) Leftovers(id string) []string {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	b := r.h.boxes[id]
	if b == nil {
		return nil
	}
	out := []string{"sandbox " + id + " (" + string(b.state) + ")"}
	if b.stop != nil {
		out = append(out, "boot hook of "+id+" still running")
	}
	return out
}

// begin records the call and returns the injected failure, if any.
// Called with h.mu held.
func (r *Runtime) begin(op Op, id string) error {
	r.h.calls = append(r.h.calls, Call{op, id})
	if f := r.h.fail[op]; f != nil {
		if err := f(id); err != nil {
			return fmt.Errorf("fakeruntime: %s %s: %w", op, id, err)
		}
	}
	return nil
}

func (r *Runtime) Name() string { return "fake" }

func (r *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{Checkpoint: true, LiveDiskSnapshot: true}
}

// Run makes the sandbox (OpCreate) and starts it (OpStart): a failure
// injected at either step leaves nothing behind, as runsc run's does.
func (r *Runtime) Run(ctx context.Context, spec runtime.Spec) error {
	r.h.mu.Lock()
	if err := r.begin(OpCreate, spec.ID); err != nil {
		r.h.mu.Unlock()
		return err
	}
	if err := r.createLocked(spec, nil); err != nil {
		r.h.mu.Unlock()
		return err
	}
	if err := r.begin(OpStart, spec.ID); err != nil {
		delete(r.h.boxes, spec.ID)
		r.h.mu.Unlock()
		return err
	}
	return r.startLocked(spec.ID)
}

// CreateOnly makes a sandbox that is created and not started, as runsc
// run cut off between its two steps leaves one (for tests of what a crash
// leaves behind).
func (r *Runtime) CreateOnly(spec runtime.Spec) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	return r.createLocked(spec, nil)
}

// startLocked makes the sandbox id just made running and runs its Boot
// hook; a failed one leaves nothing. It unlocks r.h.mu.
func (r *Runtime) startLocked(id string) error {
	b := r.h.boxes[id]
	b.state = runtime.StateRunning
	r.h.mu.Unlock()
	if err := r.boot(b); err != nil {
		r.h.mu.Lock()
		delete(r.h.boxes, id)
		r.h.mu.Unlock()
		return err
	}
	return nil
}

func (r *Runtime) createLocked(spec runtime.Spec, from *runtime.Spec) error {
	if spec.ID == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "sandbox id is empty")
	}
	if _, ok := r.h.boxes[spec.ID]; ok {
		return errdefs.New(errdefs.ErrAlreadyExists, "sandbox %s already exists", spec.ID)
	}
	// What a real engine would fail on without making anything: its image
	// and its disk snapshot must be there.
	if fi, err := os.Stat(spec.RootFS); err != nil || !fi.IsDir() {
		return errdefs.New(errdefs.ErrNotFound, "root filesystem %q is not a directory", spec.RootFS)
	}
	if spec.DiskImage != "" {
		if _, err := readImage(spec.DiskImage, "disk"); err != nil {
			return err
		}
	}
	prio := map[runtime.Priority]int{runtime.PriorityBackground: Low, runtime.PriorityUrgent: High}[spec.Priority]
	if prio == 0 {
		prio = Normal
	}
	r.h.boxes[spec.ID] = &sandbox{spec: spec, state: runtime.StateCreated, from: from, priority: prio, madeAt: prio}
	return nil
}

// boot runs the Boot hook of a sandbox just made running.
func (r *Runtime) boot(b *sandbox) error {
	if r.opts.Boot == nil {
		return nil
	}
	stop, err := r.opts.Boot(Boot{Spec: b.spec, From: b.from})
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err != nil {
		b.state = runtime.StateStopped
		return fmt.Errorf("fakeruntime: boot %s: %w", b.spec.ID, err)
	}
	if b.state != runtime.StateRunning || r.h.boxes[b.spec.ID] != b {
		// Killed or destroyed while its hook ran.
		if stop != nil {
			go stop()
		}
		return nil
	}
	b.stop = stop
	return nil
}

func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	r.h.mu.Lock()
	if err := r.begin(OpStop, id); err != nil {
		r.h.mu.Unlock()
		return err
	}
	b := r.h.boxes[id]
	if b == nil {
		r.h.mu.Unlock()
		return errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	b.state = runtime.StateStopped
	stop := b.stop
	b.stop = nil
	r.h.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

func (r *Runtime) Destroy(ctx context.Context, id string) error {
	r.h.mu.Lock()
	if err := r.begin(OpDestroy, id); err != nil {
		r.h.mu.Unlock()
		return err
	}
	// A real runtime's work ends with its context (runsc runs under it):
	// a teardown that outlives its request must not use that one.
	if err := ctx.Err(); err != nil {
		r.h.mu.Unlock()
		return fmt.Errorf("fakeruntime: destroy %s: %w", id, err)
	}
	b := r.h.boxes[id]
	delete(r.h.boxes, id)
	r.h.mu.Unlock()
	if b != nil && b.stop != nil {
		b.stop()
	}
	return nil
}

func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(OpState, id); err != nil {
		return "", err
	}
	if b := r.h.boxes[id]; b != nil {
		return b.state, nil
	}
	return runtime.StateUnknown, nil
}

func (r *Runtime) List(ctx context.Context) ([]string, error) {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(OpList, ""); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(r.h.boxes))
	for id := range r.h.boxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// ExitReason is what Kill was told.
func (r *Runtime) ExitReason(ctx context.Context, id string) string {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if b := r.h.boxes[id]; b != nil {
		return b.reason
	}
	return ""
}

// Foreground gives a sandbox the normal priority.
func (r *Runtime) Foreground(ctx context.Context, id string) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(OpForeground, id); err != nil {
		return err
	}
	b := r.h.boxes[id]
	if b == nil {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	b.priority = Normal
	return nil
}

var _ runtime.Resizer = (*Runtime)(nil)

// Resizable: the fake changes CPUs in place, and nothing else (as a
// runtime whose guest sees its memory, disk and process limit as booted).
func (r *Runtime) Resizable(from, to runtime.Limits) bool {
	from.CPUs, to.CPUs = 0, 0
	return from == to
}

// Resize sets a running sandbox's limits (Limits reads them).
func (r *Runtime) Resize(ctx context.Context, id string, to runtime.Limits) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(OpResize, id); err != nil {
		return err
	}
	b := r.h.boxes[id]
	if b == nil {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	if b.state != runtime.StateRunning {
		return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %s is %s", id, b.state)
	}
	if !r.Resizable(b.spec.Limits, to) {
		return errdefs.New(errdefs.ErrInvalidArgument, "sandbox %s cannot be resized from %+v to %+v", id, b.spec.Limits, to)
	}
	b.spec.Limits = to
	return nil
}

// Limits are sandbox id's limits now (zero for an unknown id).
func (r *Runtime) Limits(id string) runtime.Limits {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if b := r.h.boxes[id]; b != nil {
		return b.spec.Limits
	}
	return runtime.Limits{}
}

// transition moves a sandbox from one state to another under op.
func (r *Runtime) transition(op Op, id string, from, to runtime.State) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(op, id); err != nil {
		return err
	}
	b := r.h.boxes[id]
	if b == nil {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %s not found", id)
	}
	if b.state != from {
		return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %s is %s, not %s", id, b.state, from)
	}
	b.state = to
	return nil
}

func (r *Runtime) Freeze(ctx context.Context, id string) error {
	return r.transition(OpFreeze, id, runtime.StateRunning, runtime.StatePaused)
}

func (r *Runtime) Thaw(ctx context.Context, id string) error {
	return r.transition(OpThaw, id, runtime.StatePaused, runtime.StateRunning)
}

// Checkpoint writes an image naming the sandbox's spec; the fake has no
// memory to save.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	r.h.mu.Lock()
	if err := r.begin(OpCheckpoint, id); err != nil {
		r.h.mu.Unlock()
		return err
	}
	b := r.h.boxes[id]
	if b == nil || (b.state != runtime.StateRunning && b.state != runtime.StatePaused) {
		r.h.mu.Unlock()
		return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %s is not running", id)
	}
	if err := writeImage(dir, image{Kind: "memory", Spec: b.spec}); err != nil {
		r.h.mu.Unlock()
		return err
	}
	var stop func()
	if !leaveRunning {
		b.state = runtime.StateStopped
		stop, b.stop = b.stop, nil
	}
	r.h.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

// Restore makes and starts spec.ID from a memory image.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, dir string) error {
	r.h.mu.Lock()
	if err := r.begin(OpRestore, spec.ID); err != nil {
		r.h.mu.Unlock()
		return err
	}
	img, err := readImage(dir, "memory")
	if err == nil {
		err = r.createLocked(spec, &img.Spec)
	}
	if err != nil {
		r.h.mu.Unlock()
		return err
	}
	return r.startLocked(spec.ID)
}

// SnapshotDisk writes a disk image naming the sandbox; the sandbox runs on.
func (r *Runtime) SnapshotDisk(ctx context.Context, id, dir string) error {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if err := r.begin(OpSnapshotDisk, id); err != nil {
		return err
	}
	b := r.h.boxes[id]
	if b == nil || (b.state != runtime.StateRunning && b.state != runtime.StatePaused) {
		return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %s is not running", id)
	}
	return writeImage(dir, image{Kind: "disk", Spec: b.spec})
}

func (r *Runtime) Version() string { return "fakeruntime 1" }

func writeImage(dir string, img image) error {
	path := filepath.Join(dir, imageFile)
	if _, err := os.Stat(path); err == nil {
		return errdefs.New(errdefs.ErrAlreadyExists, "%s already holds an image", dir)
	}
	b, err := json.Marshal(img)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func readImage(dir, kind string) (*image, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageFile))
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrNotFound, err, "no %s image in %s", kind, dir)
	}
	var img image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("read image in %s: %w", dir, err)
	}
	if img.Kind != kind {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%s holds a %s image, not %s", dir, img.Kind, kind)
	}
	return &img, nil
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.Checkpointer = (*Runtime)(nil)
	_ runtime.Prioritizer  = (*Runtime)(nil)
	_ runtime.ExitReasoner = (*Runtime)(nil)
)
