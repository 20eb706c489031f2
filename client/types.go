package client

import "time"

// Sandbox states.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateKilled   = "killed"
	StateLost     = "lost"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero fields take the
// daemon's defaults (template base, 300 s, 1 vCPU, 512 MB, 1024 MB disk).
type CreateSandboxRequest struct {
	Template       string            `json:"template,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	CPU            int               `json:"cpu,omitempty"`
	MemoryMB       int               `json:"memory_mb,omitempty"`
	DiskMB         int               `json:"disk_mb,omitempty"`
	MaxProcesses   int               `json:"max_processes,omitempty"`
	// Pool set to false skips the daemon's warm pool (a cold create).
	Pool *bool `json:"pool,omitempty"`
	// Snapshot starts the sandbox from a snapshot, by ID or name[:tag]:
	// on its disk with fresh processes, or, from a full snapshot (Memory),
	// going on from its memory and processes. Template may be left out.
	Snapshot string `json:"snapshot,omitempty"`
	// SnapshotEverySeconds and SnapshotKeep schedule disk snapshots.
	SnapshotEverySeconds int `json:"snapshot_every_seconds,omitempty"`
	SnapshotKeep         int `json:"snapshot_keep,omitempty"`
	// IdleFreezeSeconds freezes the sandbox at rest (no CPU, still
	// running; the next request wakes it) after this long unreached: 0 the
	// node's default, -1 never.
	IdleFreezeSeconds int `json:"idle_freeze_seconds,omitempty"`
	// AutoPause pauses the sandbox at its timeout instead of killing it;
	// AutoResume lets a request through the E2B proxy resume it.
	AutoPause  bool `json:"auto_pause,omitempty"`
	AutoResume bool `json:"auto_resume,omitempty"`
	// AutoPauseKeepMemory set to false makes the pause at the timeout keep
	// the disk only (not with AutoResume).
	AutoPauseKeepMemory *bool `json:"auto_pause_keep_memory,omitempty"`
	// KeyID names a customer key (PutKey) to encrypt checkpoints under.
	KeyID string `json:"key_id,omitempty"`
	// Network is the egress policy; nil means no egress at all.
	Network *Network `json:"network,omitempty"`
	// Secrets maps env var names to secret names: the sandbox gets a
	// placeholder, which the egress gateway replaces on requests to the
	// secret's binding.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Volumes are mounted into the sandbox (CreateVolume makes them).
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// Network is a sandbox's egress policy: entries are host names,
// "*.suffix", addresses and CIDRs, each with an optional ":port". Deny
// entries win over allow entries.
type Network struct {
	Internet bool     `json:"internet"`
	Allow    []string `json:"allow,omitempty"`
	Deny     []string `json:"deny,omitempty"`
	// PublicPorts (create only) opens the sandbox's ports through the
	// <port>-<id> proxy without a token.
	PublicPorts bool `json:"public_ports,omitempty"`
}

// Sandbox is the daemon's view of one sandbox.
type Sandbox struct {
	ID           string            `json:"id"`
	State        string            `json:"state"`
	Template     string            `json:"template"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	CPU          int               `json:"cpu,omitempty"`
	MemoryMB     int               `json:"memory_mb,omitempty"`
	DiskMB       int               `json:"disk_mb,omitempty"`
	MaxProcesses int               `json:"max_processes,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	// AccessToken is only set in the answer to CreateSandbox.
	AccessToken string `json:"access_token,omitempty"`
	// Reason says why a sandbox is lost, paused or was killed.
	Reason               string `json:"reason,omitempty"`
	AutoPause            bool   `json:"auto_pause,omitempty"`
	AutoResume           bool   `json:"auto_resume,omitempty"`
	AutoPauseKeepMemory  *bool  `json:"auto_pause_keep_memory,omitempty"`
	KeyID                string `json:"key_id,omitempty"`
	SnapshotEverySeconds int    `json:"snapshot_every_seconds,omitempty"`
	SnapshotKeep         int    `json:"snapshot_keep,omitempty"`
	// IdleFreezeSeconds is the sandbox's own idle freeze delay (-1 never;
	// 0: the node's default).
	IdleFreezeSeconds int `json:"idle_freeze_seconds,omitempty"`
	// Rest is RestFrozen or RestAwake, only from GetSandboxRest.
	Rest       string      `json:"rest,omitempty"`
	PausedAt   *time.Time  `json:"paused_at,omitempty"`
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// Network is the sandbox's egress policy (nil: no egress).
	Network *Network `json:"network,omitempty"`
	// Volumes are the volumes mounted into it.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Node is the cluster node that runs it (cluster mode only).
	Node string `json:"node,omitempty"`
}

// Checkpoint is a sandbox's latest complete checkpoint and its cost.
type Checkpoint struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	TookMS    int64     `json:"took_ms"`
	// Memory is false for a pause that kept the disk only: a resume boots
	// afresh on it.
	Memory bool `json:"memory"`
}

// Snapshot is a stored snapshot: a disk snapshot, or a full one (Memory).
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	TookMS    int64     `json:"took_ms"`
	KeyID     string    `json:"key_id,omitempty"`
	Memory    bool      `json:"memory"`
	Name      string    `json:"name,omitempty"`
	Tag       string    `json:"tag,omitempty"`
}

// ListOptions filters ListSandboxes. The zero value lists running sandboxes.
type ListOptions struct {
	States    []string          // e.g. {"running","killed"}; empty means the daemon's default (running)
	Metadata  map[string]string // all pairs must match
	Limit     int               // page size, 1..1000; 0 means the daemon's default (100)
	PageToken string            // from a previous page's NextPageToken
}

// SandboxPage is one page of ListSandboxes, newest first.
type SandboxPage struct {
	Sandboxes     []Sandbox `json:"sandboxes"`
	NextPageToken string    `json:"next_page_token,omitempty"` // empty on the last page
}

// CommandRequest is the body of POST /v1/sandboxes/{id}/commands. Set exactly
// one of Cmd (run by /bin/sh -c) and Argv.
type CommandRequest struct {
	Cmd   string            `json:"cmd,omitempty"`
	Argv  []string          `json:"argv,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"`
	Stdin string            `json:"stdin,omitempty"`
	// KeepStdinOpen leaves stdin open after Stdin is written, for SendStdin.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty"`
	// TimeoutSeconds kills the command after that long; 0 means no limit.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Background is set by StartBackground and cleared by RunCommand.
	Background bool   `json:"background,omitempty"`
	Tag        string `json:"tag,omitempty"`
}

// Command is a command started in a sandbox.
type Command struct {
	PID  int      `json:"pid"`
	Tag  string   `json:"tag,omitempty"`
	Cmd  string   `json:"cmd,omitempty"`
	Args []string `json:"args,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

// Entry types.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	EntryOther   = "other"
)

// Entry describes a file or directory in a sandbox.
type Entry struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"`
	Size          int64     `json:"size,omitempty"`
	Mode          uint32    `json:"mode,omitempty"` // permission bits
	Permissions   string    `json:"permissions,omitempty"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedAt    time.Time `json:"modified_at,omitzero"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}
