// Package runtime is the one interface every sandbox engine implements. The
// code above it speaks of sandboxes; only a driver (gvisor, later
// firecracker) knows how an isolated machine is made.
package runtime

import (
	"context"
	"io"
	"time"
)

// Spec is everything a driver needs to make one sandbox.
type Spec struct {
	ID string
	// RootFS is the template's image, shared read-only by every sandbox.
	RootFS string
	// Netns is the path of the network namespace the sandbox joins.
	Netns string
	// Args and Env are the sandbox's init process (the agent).
	Args   []string
	Env    []string
	Limits Limits
	// DiskImage, when set, is a disk snapshot (see Checkpointer.SnapshotDisk)
	// the sandbox's writable layer starts from.
	DiskImage string
	// Priority is the sandbox's CPU priority among the others until
	// Prioritizer.Foreground gives it the normal one; runtimes that cannot
	// ignore it.
	Priority Priority
	// Mounts are host directories the sandbox sees at their paths
	// (volumes). A checkpoint does not hold their contents: a restore
	// must be given the same mounts, whose sources may differ.
	Mounts []Mount
}

// Priority is a sandbox's share of the host's CPU against the others'.
type Priority int

const (
	// PriorityNormal is every running sandbox's.
	PriorityNormal Priority = iota
	// PriorityBackground is the lowest: a warm-pool sandbox nobody waits
	// for boots at it, and takes the CPU only when the others leave it.
	PriorityBackground
	// PriorityUrgent is above the others: a sandbox that someone waits on
	// while it is restored (a resume, a fork, the wake of a hibernated
	// one) is not made to wait behind busy ones.
	PriorityUrgent
)

// Mount is a host directory bound into a sandbox.
type Mount struct {
	// Source is the host directory; Destination the absolute path inside.
	Source, Destination string
	ReadOnly            bool
}

// Prioritizer is implemented by runtimes that can run a sandbox made with
// a Spec.Priority other than normal at that priority, and change it later.
type Prioritizer interface {
	// Foreground gives sandbox id the normal CPU priority.
	Foreground(ctx context.Context, id string) error
}

// Resizer is implemented by runtimes that can change the limits of a
// running sandbox in place, so a warm-pool sandbox booted with the
// default limits can be given a caller's other ones at claim.
type Resizer interface {
	// Resizable reports whether a sandbox made with from can be given to
	// by Resize such that nothing inside it can tell it from a sandbox
	// made with to (what the guest sees of its CPUs, memory, disk and
	// process limit is the same).
	Resizable(from, to Limits) bool
	// Resize gives running sandbox id the limits to (Resizable from its
	// own).
	Resize(ctx context.Context, id string, to Limits) error
}

// Limits per sandbox.
type Limits struct {
	CPUs     int
	MemoryMB int
	DiskMB   int
	// MaxProcs bounds processes per user inside the sandbox (RLIMIT_NPROC).
	MaxProcs int
}

// State of a sandbox as the runtime sees it.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateStopped State = "stopped"
	// StatePaused: frozen by Checkpointer.Freeze, processes stopped in place.
	StatePaused State = "paused"
	// StateUnknown means the runtime holds no sandbox of that id.
	StateUnknown State = "unknown"
)

// Capabilities say which optional features a runtime has.
type Capabilities struct {
	// Checkpoint: the runtime implements Checkpointer.
	Checkpoint bool
	// LiveDiskSnapshot: the writable layer can be copied without pausing.
	LiveDiskSnapshot bool
}

// Runtime makes and drives isolated machines. Every method is safe for
// concurrent use on different ids. Destroy is idempotent and removes every
// host resource the runtime made for id, even for half-made sandboxes.
type Runtime interface {
	Name() string
	Capabilities() Capabilities
	// Run makes the sandbox and starts its init process, in one step (for
	// runsc one command, not two: each runsc command is a Go program's start
	// on the host). A failure leaves nothing of the sandbox behind.
	Run(ctx context.Context, spec Spec) error
	// Stop asks the init process to exit and kills the sandbox after grace.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Destroy removes the sandbox and everything it had on the host.
	Destroy(ctx context.Context, id string) error
	State(ctx context.Context, id string) (State, error)
	// List returns the ids of every sandbox the runtime holds, so the daemon
	// can re-attach after a restart and destroy those no record owns.
	List(ctx context.Context) ([]string, error)
}

// Checkpointer is implemented by runtimes whose Capabilities have
// Checkpoint. Image directories are local; moving them to object storage is
// the caller's job.
type Checkpointer interface {
	// Freeze stops every process of a running sandbox in place; Thaw lets
	// them go on. A frozen sandbox reports StatePaused.
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
	// Checkpoint saves the sandbox's memory, processes and writable layer
	// into dir (which must not hold an image yet). With leaveRunning the
	// sandbox goes on (a frozen one stays frozen); without it, it stops.
	Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error
	// Restore makes and starts a new sandbox spec.ID from the image in dir.
	// The spec's network may differ from the checkpointed sandbox's: the
	// restored sandbox takes the addresses of its own namespace.
	Restore(ctx context.Context, spec Spec, dir string) error
	// SnapshotDisk saves the sandbox's writable layer into dir, stopping
	// its processes only for the instant of the copy (a point-in-time,
	// crash-consistent image); Spec.DiskImage starts a sandbox from it.
	SnapshotDisk(ctx context.Context, id, dir string) error
	// Version names the engine build; images restore only into the same one.
	Version() string
}

// ProcessRevision numbers what a runtime gives a sandbox's first process
// beyond its Spec (its rlimits, capabilities and the like). A template's
// start checkpoint keeps its processes as they were started, so it is
// part of that checkpoint's key: a change here (revision 2: a soft limit
// of 1,024 open files, not 1,048,576) has every start taken again once.
const ProcessRevision = 2

// IdleFreezer is implemented by runtimes that can stop every host process
// of a running sandbox (for gVisor: its sentry, gofer and stubs) where it
// stands, at no CPU cost, and let it go on later with nothing inside able to
// tell but the clock (the cgroup freezer). Unlike Checkpointer.Freeze it asks
// nothing of the sandbox: a sandbox at rest is frozen this way. While a
// sandbox is frozen, State, usage reads, Resize and Destroy work; every other
// call that reaches into it needs ThawIdle first.
type IdleFreezer interface {
	// FreezeIdle returns once every process of sandbox id is frozen.
	FreezeIdle(ctx context.Context, id string) error
	// ThawIdle lets them run again; a sandbox that is not frozen is left
	// as it is.
	ThawIdle(ctx context.Context, id string) error
	// IdleFrozen reports whether sandbox id is frozen (a restarted daemon
	// finds the sandboxes its predecessor froze).
	IdleFrozen(ctx context.Context, id string) (bool, error)
}

// ExitReasoner is implemented by runtimes that can say why a sandbox
// stopped on its own (for example "out of memory").
type ExitReasoner interface {
	ExitReason(ctx context.Context, id string) string
}

// LayerExporter is implemented by runtimes that can write what a sandbox
// changed in its filesystem (its writable layer) as an OCI image layer: a
// tar changeset whose deletions are ".wh." whiteout entries and whose
// directories that replaced a lower one carry a ".wh..wh..opq" marker. A
// template build turns each step into one such layer.
type LayerExporter interface {
	// ExportLayer writes sandbox id's writable layer to w. The sandbox
	// may be running; the layer is what it holds at that instant. Files
	// the runtime itself manages (the resolver configuration) are left
	// out, as a container build leaves them out of its layers.
	ExportLayer(ctx context.Context, id string, w io.Writer) error
}
