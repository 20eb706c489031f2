package client

import "github.com/spacesandbox/space/client/apitypes"

// Sandbox states.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateKilled   = "killed"
	StateLost     = "lost"
)

// The API's wire types, generated from api/openapi.yaml (package
// apitypes): a field an answer leaves out reads as its zero value.
type (
	// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero fields
	// take the daemon's defaults (template base, 300 s, 1 vCPU, 512 MB,
	// 1024 MB disk).
	CreateSandboxRequest = apitypes.CreateSandboxRequest
	// Network is a sandbox's egress policy.
	Network = apitypes.Network
	// Sandbox is a sandbox as the daemon reports it.
	Sandbox = apitypes.Sandbox
	// Checkpoint is a sandbox's latest complete checkpoint and its cost.
	Checkpoint = apitypes.SandboxCheckpoint
	// Snapshot is a stored snapshot: a disk snapshot, or a full one (Memory).
	Snapshot = apitypes.Snapshot
	// CommandRequest is the body of POST /v1/sandboxes/{id}/commands: set
	// exactly one of Cmd and Argv.
	CommandRequest = apitypes.CommandRequest
	// Command is a running command.
	Command = apitypes.Command
	// Entry is a file or directory in a sandbox.
	Entry = apitypes.Entry
)

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

// Entry types.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	EntryOther   = "other"
)
