package httpapi

import (
	"context"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// recordingSandboxes is the sandbox service and telemetry of unit tests
// that must not reach them: every sandbox is the default tenant's, and
// every other call is recorded and answered "not found". Owner is not
// recorded: the guard of sandbox routes asks it before any handler runs,
// and it changes nothing.
type recordingSandboxes struct {
	mu    sync.Mutex
	calls []string
}

var (
	_ Sandboxes = (*recordingSandboxes)(nil)
	_ Telemetry = (*recordingSandboxes)(nil)
)

// Calls returns the methods called so far, in order.
func (f *recordingSandboxes) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *recordingSandboxes) call(method string) error {
	f.mu.Lock()
	f.calls = append(f.calls, method)
	f.mu.Unlock()
	return errdefs.New(errdefs.ErrNotFound, "the test's fake sandbox service has nothing for %s", method)
}

func (f *recordingSandboxes) Owner(context.Context, string) (string, bool) {
	return tenant.Default, true
}

func (f *recordingSandboxes) Create(context.Context, sandbox.CreateRequest) (*sandbox.Sandbox, error) {
	return nil, f.call("Create")
}

func (f *recordingSandboxes) Get(context.Context, string) (*sandbox.Sandbox, error) {
	return nil, f.call("Get")
}

func (f *recordingSandboxes) List(context.Context, sandbox.ListFilter) ([]*sandbox.Sandbox, error) {
	return nil, f.call("List")
}

func (f *recordingSandboxes) ListPage(context.Context, sandbox.ListFilter, int, string) ([]*sandbox.Sandbox, string, error) {
	return nil, "", f.call("ListPage")
}

func (f *recordingSandboxes) Kill(context.Context, string) error { return f.call("Kill") }

func (f *recordingSandboxes) SetTimeout(context.Context, string, time.Duration) (*sandbox.Sandbox, error) {
	return nil, f.call("SetTimeout")
}

func (f *recordingSandboxes) SetNetwork(context.Context, string, *sandbox.NetworkPolicy) error {
	return f.call("SetNetwork")
}

func (f *recordingSandboxes) SetIdleFreeze(context.Context, string, time.Duration, *time.Duration) (*sandbox.Sandbox, error) {
	return nil, f.call("SetIdleFreeze")
}

func (f *recordingSandboxes) Rest(string) (string, error) { return "", f.call("Rest") }

func (f *recordingSandboxes) ChangesNow() (uint64, error) { return 0, f.call("ChangesNow") }

func (f *recordingSandboxes) Changes(context.Context, uint64) ([]sandbox.Change, uint64, bool, error) {
	return nil, 0, false, f.call("Changes")
}

func (f *recordingSandboxes) Pause(context.Context, string, sandbox.PauseOptions) (*sandbox.Sandbox, error) {
	return nil, f.call("Pause")
}

func (f *recordingSandboxes) Resume(context.Context, string, time.Duration) (*sandbox.Sandbox, error) {
	return nil, f.call("Resume")
}

func (f *recordingSandboxes) Fork(context.Context, string, sandbox.ForkRequest) ([]*sandbox.Sandbox, error) {
	return nil, f.call("Fork")
}

func (f *recordingSandboxes) TakeSnapshot(context.Context, string, sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	return nil, f.call("TakeSnapshot")
}

func (f *recordingSandboxes) Snapshots(context.Context, sandbox.SnapshotFilter) ([]*sandbox.Snapshot, error) {
	return nil, f.call("Snapshots")
}

func (f *recordingSandboxes) GetSnapshot(context.Context, string) (*sandbox.Snapshot, error) {
	return nil, f.call("GetSnapshot")
}

func (f *recordingSandboxes) DeleteSnapshot(context.Context, string) (int, error) {
	return 0, f.call("DeleteSnapshot")
}

func (f *recordingSandboxes) SetKey(string, []byte) error { return f.call("SetKey") }

func (f *recordingSandboxes) RotateKey(context.Context, string, []byte) (int, error) {
	return 0, f.call("RotateKey")
}

func (f *recordingSandboxes) RemoveKey(string) error { return f.call("RemoveKey") }

func (f *recordingSandboxes) KeyIDs() ([]string, error) { return nil, f.call("KeyIDs") }

func (f *recordingSandboxes) StartCommand(context.Context, string, sandbox.CommandSpec) (*sandbox.CommandStream, error) {
	return nil, f.call("StartCommand")
}

func (f *recordingSandboxes) AttachCommand(context.Context, string, uint32, uint64) (*sandbox.CommandStream, error) {
	return nil, f.call("AttachCommand")
}

func (f *recordingSandboxes) ListCommands(context.Context, string) ([]sandbox.CommandInfo, error) {
	return nil, f.call("ListCommands")
}

func (f *recordingSandboxes) SendStdin(context.Context, string, uint32, []byte) error {
	return f.call("SendStdin")
}

func (f *recordingSandboxes) CloseStdin(context.Context, string, uint32) error {
	return f.call("CloseStdin")
}

func (f *recordingSandboxes) SignalCommand(context.Context, string, uint32, syscall.Signal) error {
	return f.call("SignalCommand")
}

func (f *recordingSandboxes) ReadFile(context.Context, string, string, string) (*sandbox.FileContent, error) {
	return nil, f.call("ReadFile")
}

func (f *recordingSandboxes) WriteFile(context.Context, string, string, io.Reader, int64) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, f.call("WriteFile")
}

func (f *recordingSandboxes) StatFile(context.Context, string, string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, f.call("StatFile")
}

func (f *recordingSandboxes) RemoveFile(context.Context, string, string) error {
	return f.call("RemoveFile")
}

func (f *recordingSandboxes) ListDir(context.Context, string, string, int) ([]sandbox.FileEntry, error) {
	return nil, f.call("ListDir")
}

func (f *recordingSandboxes) MakeDir(context.Context, string, string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, f.call("MakeDir")
}

func (f *recordingSandboxes) MoveFile(context.Context, string, string, string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, f.call("MoveFile")
}

func (f *recordingSandboxes) WatchDir(context.Context, string, string, bool) (*sandbox.DirWatch, error) {
	return nil, f.call("WatchDir")
}

func (f *recordingSandboxes) Interval() time.Duration { return time.Second }

func (f *recordingSandboxes) Metrics(context.Context, string, time.Time, time.Time) ([]sandbox.MetricSample, error) {
	return nil, f.call("Metrics")
}

func (f *recordingSandboxes) Logs(context.Context, string, sandbox.LogQuery) ([]sandbox.LogEntry, error) {
	return nil, f.call("Logs")
}

func (f *recordingSandboxes) FollowLogs(context.Context, string, sandbox.LogQuery) ([]sandbox.LogEntry, <-chan sandbox.LogEntry, func(), error) {
	return nil, nil, nil, f.call("FollowLogs")
}

func (f *recordingSandboxes) FollowMetrics() ([]sandbox.SandboxSample, <-chan sandbox.SandboxSample, func()) {
	f.call("FollowMetrics")
	ch := make(chan sandbox.SandboxSample)
	return nil, ch, func() {}
}
