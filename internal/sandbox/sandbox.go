// Package sandbox is the domain: the sandbox lifecycle (create, kill,
// timeouts, recovery after a restart) on top of a runtime, the network and
// the store. It owns every sandbox on this node.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/spacesandbox/space/internal/runtime"
)

// State is where a sandbox is in its lifecycle, as callers see it.
type State string

// The states callers see (a pooled sandbox is nobody's and never shown).
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	// StatePaused: checkpointed and holding nothing on the host;
	// Sandbox.Checkpoint names the checkpoint it resumes from.
	StatePaused State = "paused"
	// StateResuming: a paused sandbox being restored.
	StateResuming State = "resuming"
	StateKilled   State = "killed"
	StateLost     State = "lost"
)

// Sandbox is what callers see of one sandbox.
type Sandbox struct {
	ID        string
	Template  string
	State     State
	Reason    string
	CreatedAt time.Time
	ExpiresAt time.Time
	CPU       int
	MemoryMB  int
	DiskMB    int
	MaxProcs  int
	Metadata  map[string]string
	// AccessToken opens the sandbox's agent; set only on Create's result.
	AccessToken string
	// OpenAccess: E2B secure=false, the E2B proxy needs no token.
	OpenAccess bool
	// Network is the requested egress policy (stored, not yet enforced).
	Network *NetworkPolicy
	// Checkpoint is the latest complete checkpoint (paused sandboxes).
	Checkpoint *CheckpointInfo
	PausedAt   time.Time
	AutoPause  bool
	AutoResume bool
	// AutoPauseDiskOnly: the pause at the timeout keeps the disk only.
	AutoPauseDiskOnly bool
	KeyID             string
	// SnapshotEvery and SnapshotKeep: the disk snapshot schedule.
	SnapshotEvery time.Duration
	SnapshotKeep  int
	// IdleFreeze is how long it may go unreached before it is frozen at
	// rest: 0 the node's default, < 0 never.
	IdleFreeze time.Duration
	// IdleHibernate is how long it may go unreached before it is
	// hibernated (0: the node's default, < 0: never).
	IdleHibernate time.Duration
	// Rest is RestFrozen or RestAwake for a running sandbox when asked
	// for (Service.Rest), else empty.
	Rest string
	// Volumes are the volumes mounted into it.
	Volumes []VolumeMount
	// Tenant owns it.
	Tenant string
	// Node runs it (cluster mode; "" with one node or when not live).
	Node string
}

// NetworkPolicy is a requested egress policy. Nil pointers mean "not
// said". The egress gateway enforces it (internal/egress/policy parses it).
type NetworkPolicy struct {
	AllowInternet      *bool
	AllowOut           []string
	DenyOut            []string
	AllowPublicTraffic *bool
	// AllowFirst: an allow entry that matches wins over a deny entry
	// (E2B's precedence); otherwise deny entries win.
	AllowFirst bool
	// Headers are set by the egress gateway on every HTTP(S) request to
	// a host (host -> header -> value; E2B's network.rules transforms).
	Headers map[string]map[string]string
	// Extra holds front-end specific settings as sent (E2B rules, egress
	// proxy, masked host), kept so they can be reported back.
	Extra json.RawMessage
}

// CreateRequest is a validated-by-Create request for a new sandbox. Zero
// values take the configured defaults.
type CreateRequest struct {
	Template string
	Timeout  time.Duration
	Env      map[string]string
	Metadata map[string]string
	CPU      int
	MemoryMB int
	DiskMB   int
	MaxProcs int
	// NoPool skips the warm pool (benchmarks measure cold creates with it).
	NoPool bool
	// OpenAccess and Network: see Sandbox.
	OpenAccess bool
	Network    *NetworkPolicy
	// Snapshot starts the sandbox from a snapshot (its ID, or name[:tag]):
	// the disk of a disk snapshot, with fresh processes, or the memory,
	// processes and disk of a full one.
	Snapshot string
	// SnapshotEvery and SnapshotKeep schedule disk snapshots.
	SnapshotEvery time.Duration
	SnapshotKeep  int
	// IdleFreeze and IdleHibernate: see Sandbox.
	IdleFreeze    time.Duration
	IdleHibernate time.Duration
	// AutoPause pauses the sandbox at its timeout instead of killing it;
	// AutoResume lets traffic through the E2B proxy resume it.
	AutoPause  bool
	AutoResume bool
	// AutoPauseDiskOnly makes that pause keep the disk only (it needs
	// AutoPause and excludes AutoResume).
	AutoPauseDiskOnly bool
	// KeyID names the customer key its checkpoints are encrypted under.
	KeyID string
	// Secrets maps env var names to secret names: the sandbox gets a
	// placeholder in each, which the egress gateway replaces.
	Secrets map[string]string
	// Volumes are mounted into the sandbox, by volume name (VolumeID is
	// filled in by the create).
	Volumes []VolumeMount

	// placeholders (placeholder -> secret name) is filled by validate.
	placeholders map[string]string
	// reserved is the create's share of its tenant's quotas.
	reserved *reservation
}

func (r CreateRequest) limits() runtime.Limits {
	return runtime.Limits{CPUs: r.CPU, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB, MaxProcs: r.MaxProcs}
}

// CheckpointInfo is what callers see of a paused sandbox's checkpoint.
type CheckpointInfo struct {
	ID        string
	CreatedAt time.Time
	Bytes     int64
	// Took is how long the checkpoint took.
	Took time.Duration
	// DiskOnly: it holds the writable layer only (a pause that kept no
	// memory); a resume boots a fresh sandbox on it.
	DiskOnly bool
}

// ListFilter selects sandboxes. Empty fields match everything.
type ListFilter struct {
	States   []State
	Metadata map[string]string
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns 20 random lower-case alphanumerics, the shape E2B clients
// expect (they route on ^[a-z0-9]+$).
func newID() string {
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b)
}

// newToken returns a 256-bit random access token.
func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}
