package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// A template build runs each step in a sandbox of its own: the same gVisor
// isolation, limits and egress policy as any sandbox, because a Dockerfile
// is untrusted code. Such a sandbox belongs to its build: it is never
// listed, no API call reaches it, and a restart of spaced tears it down.

// BuildBoxSpec is a sandbox for one step of a template build.
type BuildBoxSpec struct {
	// Build is the build's id.
	Build string
	// Template names the template being built (for the record and logs).
	Template string
	// Image is the image the step starts from: its id and directory.
	Image, Root string
	Limits      runtime.Limits
	// Network is the egress policy of the step.
	Network *NetworkPolicy
	// Env, User and Workdir are the image's config at this step.
	Env     map[string]string
	User    string
	Workdir string
	// Timeout bounds the sandbox's life (it is reaped after it).
	Timeout time.Duration
}

// BuildBoxes starts the sandboxes of template builds' steps on the service,
// which boots and tears them down as any other but lets no caller reach
// them.
type BuildBoxes struct {
	svc *Service
}

// NewBuildBoxes starts build sandboxes on svc.
func NewBuildBoxes(svc *Service) *BuildBoxes { return &BuildBoxes{svc: svc} }

// BuildBox is a running build sandbox.
type BuildBox struct {
	ID  string
	s   *Service
	e   *entry
	rec store.Sandbox
}

// StartBuildBox boots a build sandbox (taking a boot turn like any create).
func (bs *BuildBoxes) StartBuildBox(ctx context.Context, spec BuildBoxSpec) (*BuildBox, error) {
	if spec.Build == "" {
		return nil, fmt.Errorf("build box without a build")
	}
	if err := checkNetwork(spec.Network); err != nil {
		return nil, err
	}
	img := &Image{Template: spec.Template, ID: spec.Image, Root: spec.Root, Env: spec.Env, User: spec.User, Workdir: spec.Workdir}
	if img.User == "" {
		img.User = "root"
	}
	// A build's sandbox takes the node's memory like any other.
	r, err := bs.svc.admits.admit(ctx, bs.svc.admits.need(spec.Limits.MemoryMB, 0, 0, false), "build")
	if err != nil {
		return nil, err
	}
	b, err := bs.svc.booter.bootTurn(ctx, bootSpec{img: img, limits: spec.Limits, state: store.StateCreating, build: spec.Build})
	if err != nil {
		r.Cancel()
		return nil, err
	}
	now := time.Now().UTC()
	rec := *b.rec
	rec.State, rec.CreatedAt, rec.ExpiresAt = store.StateRunning, now, now.Add(spec.Timeout)
	rec.Env, rec.Network = b.env, NetworkRow(spec.Network)
	if err := bs.svc.store.UpdateSandbox(ctx, &rec, store.Was(b.rec)); err != nil {
		b.undo()
		r.Cancel()
		return nil, fmt.Errorf("record build sandbox: %w", err)
	}
	e := &entry{rec: &rec, agent: b.agent, ep: b.ep, build: spec.Build}
	bs.svc.live.add(e, nil, tenant.Usage{}) // a build's: no tenant's quotas
	r.Done(ctx, rec.ID)
	return &BuildBox{ID: rec.ID, s: bs.svc, e: e, rec: rec}, nil
}

// Exec is a command of a build step.
type Exec struct {
	Argv []string
	Env  map[string]string
	User string
	Cwd  string
	// Timeout kills the command after it (0: none).
	Timeout time.Duration
}

// Output receives a command's output as it comes.
type Output func(stderr bool, data []byte)

// Run runs a command to its end and returns its exit code.
func (b *BuildBox) Run(ctx context.Context, x Exec, out Output) (int, error) {
	cfg := &process.ProcessConfig{Cmd: x.Argv[0], Args: x.Argv[1:], Envs: x.Env}
	if x.Cwd != "" {
		cfg.Cwd = &x.Cwd
	}
	noStdin := false
	req := &agentv1.ExecRequest{Start: &process.StartRequest{Process: cfg, Stdin: &noStdin}, User: x.User, TimeoutMs: uint32(x.Timeout.Milliseconds())}
	stream, err := b.e.agent.Agent.Exec(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, agentErr(err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out != nil {
			if len(d.GetStdout()) > 0 {
				out(false, d.GetStdout())
			}
			if len(d.GetStderr()) > 0 {
				out(true, d.GetStderr())
			}
		}
		if end := ev.GetEnd(); end != nil {
			for range 4 { // the stream's own end, so the connection is reused
				if !stream.Receive() {
					break
				}
			}
			if end.GetError() != "" && !end.GetExited() {
				return -1, errdefs.New(errdefs.ErrInvalidArgument, "%s", end.GetError())
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return 0, agentErr(err)
	}
	return 0, errdefs.New(errdefs.ErrUnavailable, "the command's stream ended before the command did")
}

// agentErr classifies an agent error for a build: an argument the agent
// refused (an unknown user, a missing directory) is the recipe's fault.
func agentErr(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeUnauthenticated, connect.CodePermissionDenied:
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "%s", ce.Message())
		}
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "the build sandbox's agent failed")
}

// Extract writes a tar under dest inside the sandbox with one owner and,
// if given, one mode; with single, the tar's one file goes at dest or into
// it if dest is a directory (see the agent's /files/extract).
func (b *BuildBox) Extract(ctx context.Context, dest string, tar io.Reader, owner, mode string, single bool) error {
	q := url.Values{"path": {dest}}
	if owner != "" {
		q.Set("owner", owner)
	}
	if mode != "" {
		q.Set("mode", mode)
	}
	if single {
		q.Set("single", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.e.agent.BaseURL+"/files/extract?"+q.Encode(), tar)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := b.e.agent.HTTP.Do(req)
	if err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "copy into the build sandbox")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	var body struct {
		Message string `json:"message"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) != nil || body.Message == "" {
		body.Message = string(bytes.TrimSpace(data))
	}
	if resp.StatusCode/100 == 4 {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", body.Message)
	}
	return errdefs.New(errdefs.ErrUnavailable, "copy into the build sandbox: %s", body.Message)
}

// ReadFile reads a file inside the sandbox (at most max bytes), through
// its agent; a missing file is NotFound.
func (b *BuildBox) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.e.agent.BaseURL+"/files?"+url.Values{"path": {path}, "username": {"root"}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.e.agent.HTTP.Do(req)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "read %s in the build sandbox", path)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, errdefs.New(errdefs.ErrNotFound, "%s not found", path)
	case resp.StatusCode != http.StatusOK:
		return nil, errdefs.New(errdefs.ErrUnavailable, "read %s in the build sandbox: status %d", path, resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, max))
}

// ExportLayer writes what the sandbox changed as an OCI layer.
func (b *BuildBox) ExportLayer(ctx context.Context, w io.Writer) error {
	le, ok := b.s.rt.(runtime.LayerExporter)
	if !ok {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this node's runtime (%s) cannot export layers", b.s.rt.Name())
	}
	return le.ExportLayer(ctx, b.ID, w)
}

// Checkpoint saves the running sandbox (memory, processes, disk) into dir
// and stops it: a started template's checkpoint, which sandboxes of the
// template restore. It returns the access token its agent holds.
func (b *BuildBox) Checkpoint(ctx context.Context, dir string) (string, error) {
	cp, err := b.s.ckpts.checkpointer()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("checkpoint dir: %w", err)
	}
	// Freeze first so nothing runs between the image and the teardown.
	if err := cp.Freeze(ctx, b.ID); err != nil {
		return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "could not freeze the started template")
	}
	if err := cp.Checkpoint(ctx, b.ID, dir, true); err != nil {
		return "", err
	}
	return b.rec.AccessToken, nil
}

// Close tears the sandbox down.
func (b *BuildBox) Close(ctx context.Context) {
	if err := b.s.end(context.WithoutCancel(ctx), b.ID, store.StateKilled, "build step done"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		b.s.log.Warn("tear down build sandbox", "sandbox", b.ID, "build", b.rec.Build, "err", err)
	}
}
