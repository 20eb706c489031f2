package httpapi

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// What the API needs of the sandbox domain, by responsibility. In spaced
// *sandbox.Service is Sandboxes, and sandbox's Feed, Checkpoints,
// Snapshots, CustomerKeys, Commands and Files are Changes, Checkpoints,
// Snapshots, Keys, Commands and Files; a unit test gives a handler only
// the part it uses.

// Sandboxes is the sandbox service as the API sees it.
type Sandboxes interface {
	tenant.SandboxOwners
	Lifecycle
}

// Lifecycle creates, finds, changes and ends sandboxes.
type Lifecycle interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (*sandbox.Sandbox, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context, f sandbox.ListFilter) ([]*sandbox.Sandbox, error)
	// ListPage is a page of List: up to limit, from where the page that
	// answered token ended, and the next page's token ("" after the last).
	ListPage(ctx context.Context, f sandbox.ListFilter, limit int, token string) ([]*sandbox.Sandbox, string, error)
	Kill(ctx context.Context, id string) error
	SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error)
	SetNetwork(ctx context.Context, id string, p *sandbox.NetworkPolicy) error
	// SetIdleFreeze and Rest: a sandbox's rest at idle (0 the node's
	// default, < 0 never), and whether it is frozen at rest now.
	SetIdleFreeze(ctx context.Context, id string, freeze time.Duration, hibernate *time.Duration) (*sandbox.Sandbox, error)
	Rest(id string) (string, error)
}

// Changes is the feed of sandboxes' state changes (GET /v1/events).
type Changes interface {
	ChangesNow() (uint64, error)
	Changes(ctx context.Context, seq uint64) (changes []sandbox.Change, next uint64, reset bool, err error)
}

// Checkpoints pauses, resumes and forks sandboxes.
type Checkpoints interface {
	Pause(ctx context.Context, id string, opts sandbox.PauseOptions) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, id string, timeout time.Duration) (*sandbox.Sandbox, error)
	Fork(ctx context.Context, id string, req sandbox.ForkRequest) ([]*sandbox.Sandbox, error)
}

// Snapshots takes and keeps sandboxes' snapshots.
type Snapshots interface {
	TakeSnapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (*sandbox.Snapshot, error)
	Snapshots(ctx context.Context, f sandbox.SnapshotFilter) ([]*sandbox.Snapshot, error)
	GetSnapshot(ctx context.Context, ref string) (*sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, ref string) (int, error)
}

// Keys holds the customer keys that seal sandboxes' checkpoints.
type Keys interface {
	SetKey(id string, key []byte) error
	RotateKey(ctx context.Context, id string, newKey []byte) (int, error)
	RemoveKey(id string) error
	KeyIDs() ([]string, error)
}

// Commands runs commands and terminals in sandboxes.
type Commands interface {
	StartCommand(ctx context.Context, id string, spec sandbox.CommandSpec) (*sandbox.CommandStream, error)
	AttachCommand(ctx context.Context, id string, pid uint32, afterSeq uint64) (*sandbox.CommandStream, error)
	ListCommands(ctx context.Context, id string) ([]sandbox.CommandInfo, error)
	SendStdin(ctx context.Context, id string, pid uint32, data []byte) error
	CloseStdin(ctx context.Context, id string, pid uint32) error
	SignalCommand(ctx context.Context, id string, pid uint32, sig syscall.Signal) error
}

// Files reads and writes sandboxes' files.
type Files interface {
	ReadFile(ctx context.Context, id, path, byteRange string) (*sandbox.FileContent, error)
	WriteFile(ctx context.Context, id, path string, body io.Reader, size int64) (sandbox.FileEntry, error)
	StatFile(ctx context.Context, id, path string) (sandbox.FileEntry, error)
	RemoveFile(ctx context.Context, id, path string) error
	ListDir(ctx context.Context, id, path string, depth int) ([]sandbox.FileEntry, error)
	MakeDir(ctx context.Context, id, path string) (sandbox.FileEntry, error)
	MoveFile(ctx context.Context, id, source, destination string) (sandbox.FileEntry, error)
	WatchDir(ctx context.Context, id, path string, recursive bool) (*sandbox.DirWatch, error)
}

// Telemetry is each sandbox's metrics series and log (sandbox.Telemetry).
type Telemetry interface {
	Interval() time.Duration
	Metrics(ctx context.Context, id string, from, to time.Time) ([]sandbox.MetricSample, error)
	Logs(ctx context.Context, id string, q sandbox.LogQuery) ([]sandbox.LogEntry, error)
	// FollowMetrics is the newest sample of each running sandbox and
	// every sample from then on (GET /v1/events?metrics=true).
	FollowMetrics() (now []sandbox.SandboxSample, next <-chan sandbox.SandboxSample, cancel func())
	// FollowLogs is a sandbox's lines and each new one (GET
	// /v1/sandboxes/{id}/logs?follow=true).
	FollowLogs(ctx context.Context, id string, q sandbox.LogQuery) (now []sandbox.LogEntry, next <-chan sandbox.LogEntry, cancel func(), err error)
}
