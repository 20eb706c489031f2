// Package store is spaced's durable state. Catalog is everything a node
// keeps, as one named group per kind of record (Sandboxes, Templates,
// Tenants, Volumes, Webhooks); each part of the daemon takes only the groups
// or methods it uses. Bolt is the embedded implementation (one node, no
// extra service) and Postgres the cluster catalog that many nodes share;
// Watched wraps either and publishes sandbox record writes. Every write is
// committed before the call returns.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Sandbox states as stored.
const (
	StateCreating = "creating"
	// StatePooled: booted ahead of demand, owned by nobody yet.
	StatePooled  = "pooled"
	StateRunning = "running"
	StateKilled  = "killed"
	StateLost    = "lost"
	// StatePaused: checkpointed to object storage and holding nothing on
	// the host; Checkpoint names the checkpoint it resumes from.
	StatePaused = "paused"
	// StateResuming: a paused sandbox being restored (it holds a slot).
	StateResuming = "resuming"
)

// Sandbox is the durable record of one sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Tenant owns the sandbox (empty: the default tenant; a pooled
	// sandbox has none until it is claimed).
	Tenant string `json:"tenant,omitempty"`
	// Node is the cluster node that holds the sandbox while it is live
	// (set by the cluster catalog; empty with the embedded store).
	Node     string `json:"node,omitempty"`
	Template string `json:"template"`
	// Image is the template image (a directory under the template) the
	// sandbox runs on; its checkpoints restore only onto the same one.
	Image     string            `json:"image,omitempty"`
	State     string            `json:"state"`
	Reason    string            `json:"reason,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	CPU       int               `json:"cpu"`
	MemoryMB  int               `json:"memory_mb"`
	DiskMB    int               `json:"disk_mb"`
	MaxProcs  int               `json:"max_processes"`
	Env       map[string]string `json:"env,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// AccessToken opens the sandbox's agent. The store file is 0600.
	AccessToken string `json:"access_token"`
	// Slot is the sandbox's network slot (its /30 in the sandbox range); -1 when none is held.
	Slot int `json:"slot"`
	// OpenAccess marks a sandbox created with E2B's secure=false: requests
	// through the E2B proxy need no access token (spaced adds it).
	OpenAccess bool `json:"open_access,omitempty"`
	// Network is the sandbox's egress policy, enforced by the egress
	// gateway (internal/egress); nil denies all egress.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Checkpoint is the sandbox's latest complete checkpoint (set while it
	// is paused, and kept after a resume until the next pause replaces it).
	Checkpoint *CheckpointRef `json:"checkpoint,omitempty"`
	// KeyID names the customer key its checkpoints and snapshots are
	// encrypted under; empty means the platform key.
	KeyID string `json:"key_id,omitempty"`
	// AutoPause: when the timeout passes the sandbox is paused, not killed.
	AutoPause bool `json:"auto_pause,omitempty"`
	// AutoResume: traffic for a paused sandbox (through the E2B proxy,
	// with its token) resumes it.
	AutoResume bool `json:"auto_resume,omitempty"`
	// AutoPauseDiskOnly: the pause at the timeout keeps the disk only
	// (its processes end; a resume boots afresh on that disk).
	AutoPauseDiskOnly bool `json:"auto_pause_disk_only,omitempty"`
	// SnapshotEvery and SnapshotKeep schedule disk snapshots (0: none).
	SnapshotEvery time.Duration `json:"snapshot_every,omitempty"`
	SnapshotKeep  int           `json:"snapshot_keep,omitempty"`
	// IdleFreeze is how long the sandbox may go unreached before it is
	// frozen at rest: 0 the node's default, < 0 never.
	IdleFreeze time.Duration `json:"idle_freeze,omitempty"`
	// IdleHibernate is how long the sandbox may go unreached before it
	// is hibernated (checkpointed to the node's disk, its memory given
	// back): 0 the node's default, < 0 never.
	IdleHibernate time.Duration `json:"idle_hibernate,omitempty"`
	// Hibernation is the image of the sandbox's last hibernation on this
	// node's disk. While the runtime holds no sandbox of this id, the
	// sandbox is hibernated in it; once it runs again the reference is
	// stale (its image was deleted at the wake) until the next one.
	Hibernation *CheckpointRef `json:"hibernation,omitempty"`
	// Paused is when the sandbox was last paused (for retention).
	PausedAt time.Time `json:"paused_at,omitzero"`
	// Secrets maps the placeholders in Env to the names of the secrets
	// the egress gateway puts in their place (never the values).
	Secrets map[string]string `json:"secrets,omitempty"`
	// Ending is the state (killed, lost) of an end whose teardown is in
	// progress: a restart finishes it as that, with Reason.
	Ending string `json:"ending,omitempty"`
	// Build is the template build this sandbox runs a step of: such a
	// sandbox is the build's, never listed, and torn down at a restart.
	Build string `json:"build,omitempty"`
	// Volumes are the volumes mounted into the sandbox (see VolumeMount).
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// CheckpointRef is what a record keeps of a checkpoint: the manifest in
// object storage has the rest.
type CheckpointRef struct {
	ID        string        `json:"id"`
	CreatedAt time.Time     `json:"created_at"`
	Bytes     int64         `json:"bytes"`
	Took      time.Duration `json:"took"`
	// DiskOnly: the checkpoint holds the writable layer only (a pause
	// that kept no memory); a resume boots a fresh sandbox on it.
	DiskOnly bool `json:"disk_only,omitempty"`
}

// NetworkPolicy is a requested egress policy. Nil pointers mean "not said".
type NetworkPolicy struct {
	AllowInternet      *bool    `json:"allow_internet,omitempty"`
	AllowOut           []string `json:"allow_out,omitempty"`
	DenyOut            []string `json:"deny_out,omitempty"`
	AllowPublicTraffic *bool    `json:"allow_public_traffic,omitempty"`
	// AllowFirst: an allow entry that matches wins over a deny entry
	// (E2B's precedence); otherwise deny entries win.
	AllowFirst bool `json:"allow_first,omitempty"`
	// Headers are set by the egress gateway on every HTTP(S) request to
	// a host (host -> header -> value; E2B's network.rules transforms).
	Headers map[string]map[string]string `json:"headers,omitempty"`
	// Extra holds front-end specific settings as sent (E2B rules, egress
	// proxy, masked host), kept so they can be reported back.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Live reports whether the sandbox still holds host resources.
func (s *Sandbox) Live() bool {
	return s.State == StateCreating || s.State == StatePooled || s.State == StateRunning || s.State == StateResuming
}

// Expect is what a write of a sandbox record expects the stored record to
// be: the write is a compare-and-swap, made only if the stored record is
// still in State with checkpoint Checkpoint (its id; "" for none), and
// refused with ErrFailedPrecondition otherwise. Nodes sharing a catalog
// race for paused records (a kill on one, a resume on another); the
// writer that read the record last-but-one loses, and nothing it wrote
// comes back.
type Expect struct {
	State      string
	Checkpoint string
}

// Was expects the stored record to be still as rec says.
func Was(rec *Sandbox) Expect {
	return Expect{State: rec.State, Checkpoint: rec.checkpointID()}
}

func (s *Sandbox) checkpointID() string {
	if s.Checkpoint == nil {
		return ""
	}
	return s.Checkpoint.ID
}

// check refuses a write to stored that does not expect it.
func (e Expect) check(stored *Sandbox) error {
	if stored.State == e.State && stored.checkpointID() == e.Checkpoint {
		return nil
	}
	if stored.State != e.State {
		msg := fmt.Sprintf("sandbox %q is %s, not %s", stored.ID, stored.State, e.State)
		if stored.Node != "" {
			msg += " (on node " + stored.Node + ")"
		}
		return errdefs.New(errdefs.ErrFailedPrecondition, "%s: it changed meanwhile", msg)
	}
	return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q has checkpoint %q, not %q: it changed meanwhile", stored.ID, stored.checkpointID(), e.Checkpoint)
}

// Query selects sandbox records for a list, never pooled ones nor a
// template build's: those of one of Tenants (none: every tenant's), in
// one of States (none: any), whose metadata holds every pair of Metadata.
// They come newest first (by creation time, then id, both descending),
// from After on, at most Limit (0: all).
type Query struct {
	Tenants  []string
	States   []string
	Metadata map[string]string
	After    *Cursor
	Limit    int
}

// matches reports whether s is one of the records q asks for (After
// aside).
func (q *Query) matches(s *Sandbox) bool {
	if s.State == StatePooled || s.Build != "" {
		return false
	}
	if len(q.Tenants) > 0 && !slices.Contains(q.Tenants, s.Tenant) {
		return false
	}
	if len(q.States) > 0 && !slices.Contains(q.States, s.State) {
		return false
	}
	for k, v := range q.Metadata {
		if got, ok := s.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Cursor is where a page of a Query ended: the next page starts after
// it. A store reads only the cursors it made.
type Cursor struct {
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"id"`
}

// before reports whether a record made at t with id comes after c in a
// list (newest first).
func (c *Cursor) before(t time.Time, id string) bool {
	if c == nil {
		return true
	}
	if !t.Equal(c.CreatedAt) {
		return t.Before(c.CreatedAt)
	}
	return id < c.ID
}

// Sandboxes keeps sandbox records and network slots, and answers the
// queries over them that other parts ask (the images and volumes they
// hold, the paused ones' usage).
type Sandboxes interface {
	// CreateSandbox writes a new record and gives it the lowest free slot
	// below maxSlots that avoid (if set) does not refuse, in one
	// transaction. The record's Slot is set.
	CreateSandbox(ctx context.Context, s *Sandbox, maxSlots int, avoid func(slot int) bool) error
	// UpdateSandbox replaces an existing record that is still as from
	// says (a compare-and-swap). A record that leaves the live states
	// releases its slot in the same transaction.
	UpdateSandbox(ctx context.Context, s *Sandbox, from Expect) error
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	// ListSandboxes returns every record this node acts on: its live
	// records and every record that is not live (filtering is the
	// caller's). With one node, every record. It reads the whole
	// catalog: for tests and tools, never a path that recurs (the
	// queries below answer those).
	ListSandboxes(ctx context.Context) ([]*Sandbox, error)
	// LiveSandboxes answers this node's live records: what a restart
	// finds again.
	LiveSandboxes(ctx context.Context) ([]*Sandbox, error)
	// StaleSandboxes answers the records a prune may forget, whichever
	// node ended them: those not live that ended before ended, and the
	// paused ones paused before paused (or with no pause time).
	StaleSandboxes(ctx context.Context, ended, paused time.Time) ([]*Sandbox, error)
	// HeldImages answers every image a sandbox holds, each once: those of
	// this node's live records (a template build's included) and of every
	// paused record.
	HeldImages(ctx context.Context) ([]string, error)
	// CountOnImages counts the sandboxes on one of images that hold it:
	// this node's live records, a template build's aside, and every
	// paused record (never a build's: a build's sandbox is not paused).
	CountOnImages(ctx context.Context, images []string) (int, error)
	// PausedUsage counts the paused records of one of tenants and sums
	// their checkpoints' bytes: what a tenant's quotas count at a pause.
	PausedUsage(ctx context.Context, tenants []string) (sandboxes int, bytes int64, err error)
	// VolumeHolders answers the records that hold a volume: this node's
	// live records and every paused one that mount one.
	VolumeHolders(ctx context.Context) ([]*Sandbox, error)
	// QuerySandboxes answers the records q asks for, whichever node holds
	// them (what the API lists), and where the next page starts (nil
	// when there is none).
	QuerySandboxes(ctx context.Context, q Query) ([]*Sandbox, *Cursor, error)
	// ReviveSandbox replaces an ended record that is still as from says
	// (a paused one being resumed: state paused and its checkpoint) with
	// s, which must be live, and gives it a free slot as CreateSandbox
	// does, in one transaction.
	ReviveSandbox(ctx context.Context, s *Sandbox, from Expect, maxSlots int, avoid func(slot int) bool) error
	// DeleteSandbox removes a record that is still as from says and frees
	// its slot; a record that is not there is not an error.
	DeleteSandbox(ctx context.Context, id string, from Expect) error
}

// Templates keeps templates (a name and its tags) and their builds.
type Templates interface {
	// GetTemplate returns a template (ErrNotFound when there is none).
	GetTemplate(ctx context.Context, name string) (*Template, error)
	ListTemplates(ctx context.Context) ([]*Template, error)
	PutTemplate(ctx context.Context, t *Template) error
	DeleteTemplate(ctx context.Context, name string) error
	GetBuild(ctx context.Context, id string) (*Build, error)
	ListBuilds(ctx context.Context) ([]*Build, error)
	// PutBuild writes a build and, when t is not nil, its template, in one
	// transaction (a ready build and the tags that now point at it).
	PutBuild(ctx context.Context, b *Build, t *Template) error
}

// Catalog is everything a node keeps, one named group per kind of record:
// Bolt and Postgres are one each. A part takes only the groups it uses (or
// declares the few methods it calls where it uses them).
type Catalog interface {
	Sandboxes
	Templates
	Tenants
	Volumes
	Webhooks
	Close() error
}

var (
	_ Catalog = (*Bolt)(nil)
	_ Catalog = (*Postgres)(nil)
	_ Catalog = (*Watched)(nil)
)
