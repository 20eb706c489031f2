package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
	"github.com/spacesandbox/space/internal/agent/keepalive"
	"github.com/spacesandbox/space/internal/agent/users"
)

// DefaultPath is the PATH every process gets unless the request sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Service implements envd's process.Process on top of a Manager.
type Service struct {
	m        *Manager
	defaults users.DefaultsFunc
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// NewService returns the process.Process handler.
func NewService(m *Manager, defaults users.DefaultsFunc) *Service {
	return &Service{m: m, defaults: defaults}
}

// Manager returns the registry behind the service.
func (s *Service) Manager() *Manager { return s.m }

// Launch resolves the user, environment and working directory of req and starts
// it, once per idempotency key in h (replayed: an earlier start's process;
// see Manager.StartOnce). userName overrides the Basic auth user in h.
// Errors are Connect errors.
func (s *Service) Launch(req *process.StartRequest, userName string, h http.Header, timeout time.Duration) (p *Proc, replayed bool, err error) {
	d := s.defaults()
	u, err := users.Resolve(userName, h, d)
	if err != nil {
		return nil, false, connect.NewError(connect.CodeUnauthenticated, err)
	}
	cfg := req.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return nil, false, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	dir, err := workdir(cfg, d, u)
	if err != nil {
		return nil, false, connect.NewError(connect.CodeInvalidArgument, err)
	}
	spec := Spec{
		Key:     h.Get(agentv1.IdempotencyKeyHeader),
		Config:  cfg,
		Tag:     req.Tag,
		Stdin:   req.Stdin == nil || *req.Stdin,
		User:    u,
		Env:     buildEnv(u, d.Env, cfg.GetEnvs()),
		Dir:     dir,
		Timeout: timeout,
	}
	if req.Pty != nil {
		spec.PTY = req.GetPty().GetSize()
		if spec.PTY == nil {
			spec.PTY = &process.PTY_Size{Cols: 80, Rows: 24}
		}
	}
	if p, replayed, err = s.m.StartOnce(spec); err != nil {
		return nil, false, ConnectError(err)
	}
	return p, replayed, nil
}

func workdir(cfg *process.ProcessConfig, d users.Defaults, u *users.User) (string, error) {
	if cfg.Cwd != nil && cfg.GetCwd() != "" {
		dir := users.ExpandPath(cfg.GetCwd(), u)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return "", fmt.Errorf("cwd '%s' does not exist", dir)
		}
		return dir, nil
	}
	for _, dir := range []string{d.Workdir, u.Home} {
		if dir == "" {
			continue
		}
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, nil
		}
	}
	return "/", nil
}

// buildEnv returns the process environment: only the login basics, then the
// defaults from Init, then the request's own variables, which win.
func buildEnv(u *users.User, defaults, request map[string]string) []string {
	env := map[string]string{
		"PATH":    DefaultPath,
		"HOME":    u.Home,
		"USER":    u.Name,
		"LOGNAME": u.Name,
	}
	for k, v := range defaults {
		env[k] = v
	}
	for k, v := range request {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// StartTimeout is how long a Start request lets its process live: the
// Connect-Timeout-Ms deadline, or 0 for no limit.
func StartTimeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 {
			return d
		}
		return time.Millisecond
	}
	return 0
}

// Start implements process.Process.Start.
func (s *Service) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	p, _, err := s.Launch(req.Msg, "", req.Header(), StartTimeout(ctx))
	if err != nil {
		return err
	}
	return p.Follow(ctx, 0, keepalive.Interval(req.Header()), func(e Event) error {
		return stream.Send(&process.StartResponse{Event: e.Event})
	})
}

// Connect implements process.Process.Connect: the whole buffer, then live
// events until the end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	p, err := s.m.Get(req.Msg.GetProcess())
	if err != nil {
		return ConnectError(err)
	}
	return p.Follow(ctx, 0, keepalive.Interval(req.Header()), func(e Event) error {
		return stream.Send(&process.ConnectResponse{Event: e.Event})
	})
}

// List implements process.Process.List.
func (s *Service) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	resp := &process.ListResponse{}
	for _, p := range s.m.List() {
		resp.Processes = append(resp.Processes, &process.ProcessInfo{Config: p.Config(), Pid: p.Pid(), Tag: p.Tag()})
	}
	return connect.NewResponse(resp), nil
}

// Update implements process.Process.Update (PTY resize).
func (s *Service) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.Resize(size.GetCols(), size.GetRows()); err != nil {
			return nil, ConnectError(err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// SendInput implements process.Process.SendInput.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, ConnectError(err)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func writeInput(p *Proc, in *process.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		return p.WriteStdin(v.Stdin)
	case *process.ProcessInput_Pty:
		return p.WritePTY(v.Pty)
	default:
		return nil
	}
}

// StreamInput implements process.Process.StreamInput: a start message picks
// the process, data messages are written to it.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	var p *Proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			var err error
			if p, err = s.m.Get(ev.Start.GetProcess()); err != nil {
				return nil, ConnectError(err)
			}
		case *process.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("start event must come first"))
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, ConnectError(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

// SendSignal implements process.Process.SendSignal.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	if err := p.Signal(sig); err != nil {
		return nil, ConnectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// CloseStdin implements process.Process.CloseStdin.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.CloseStdin(); err != nil {
		return nil, ConnectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// live finds a process that has not ended. Ended processes are kept so
// that Connect can replay them, but envd forgets a process when it ends:
// signals, input and resizes to it are not_found there (the SDKs' kill()
// then reports False), and so they are here.
func (s *Service) live(sel *process.ProcessSelector) (*Proc, error) {
	p, err := s.m.Get(sel)
	if err != nil {
		return nil, ConnectError(err)
	}
	if !p.Running() {
		return nil, ConnectError(p.errEnded())
	}
	return p, nil
}

// ConnectError maps package errors to Connect codes; the message is the error's.
func ConnectError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrNotFound):
		return connect.NewError(connect.CodeNotFound, trimKind(err))
	case errors.Is(err, ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, trimKind(err))
	case errors.Is(err, ErrPrecondition):
		return connect.NewError(connect.CodeFailedPrecondition, trimKind(err))
	case errors.Is(err, ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, trimKind(err))
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// trimKind drops the "not found: " style prefix so clients see envd's text,
// e.g. "process with pid 7 not found".
func trimKind(err error) error {
	msg := err.Error()
	for _, k := range []error{ErrNotFound, ErrInvalid, ErrPrecondition, ErrExists} {
		prefix := k.Error() + ": "
		if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
			return errors.New(msg[len(prefix):])
		}
	}
	return err
}

// WarmUp runs the shell once the way a caller's command runs, kept out of
// the registry. Inside gVisor a sandbox's first process pays one-time costs
// (the agent's exec and streaming code and the shell's and libc's pages
// faulted in for the first time in this sandbox); a warm-up once the
// sandbox has booted keeps them off its first real command.
func (s *Service) WarmUp(log *slog.Logger) {
	d := s.defaults()
	u, err := users.Resolve("", http.Header{}, d)
	if err != nil {
		log.Warn("warm-up command", "err", err)
		return
	}
	p, err := s.m.Start(Spec{
		Config: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "true"}},
		User:   u, Env: buildEnv(u, d.Env, nil), Dir: "/", Timeout: 10 * time.Second, Hidden: true,
	})
	if err != nil {
		log.Warn("warm-up command", "err", err)
		return
	}
	_ = p.Follow(context.Background(), 0, 0, func(e Event) error {
		_, err := protojson.Marshal(e.Event)
		return err
	})
}
