package agent

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/internal/agent/keepalive"
	"github.com/spacesandbox/space/internal/agent/process"
	"github.com/spacesandbox/space/internal/agent/users"
)

// agentService implements spaceagent.v1.Agent.
type agentService struct{ s *Server }

var _ agentv1connect.AgentHandler = (*agentService)(nil)

func (a *agentService) Init(ctx context.Context, req *connect.Request[agentv1.InitRequest]) (*connect.Response[agentv1.InitResponse], error) {
	m := req.Msg
	if m.GetAccessToken() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("access_token is required"))
	}
	next := a.s.state.get()
	next.Token = m.GetAccessToken()
	next.EnvVars = m.GetEnvVars()
	if m.GetDefaultUser() != "" {
		if _, err := users.Lookup(m.GetDefaultUser()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		next.DefaultUser = m.GetDefaultUser()
	}
	if m.GetDefaultWorkdir() != "" {
		next.DefaultWorkdir = m.GetDefaultWorkdir()
	}
	if m.GetNameserver() != "" {
		if err := writeResolvConf(m.GetNameserver()); err != nil {
			a.s.log.Error("resolver", "err", err)
			return nil, connect.NewError(connect.CodeInternal, errors.New("cannot write resolv.conf"))
		}
	}
	if m.GetCaPem() != "" {
		if err := installCA(m.GetCaPem()); err != nil {
			a.s.log.Error("egress CA", "err", err)
			return nil, connect.NewError(connect.CodeInternal, errors.New("cannot install the egress CA"))
		}
	}
	if err := a.s.state.set(next); err != nil {
		a.s.log.Error("persist init state", "err", err)
		return nil, connect.NewError(connect.CodeInternal, errors.New("cannot persist state"))
	}
	a.s.log.Info("initialised", "default_user", next.DefaultUser, "default_workdir", next.DefaultWorkdir, "env_vars", len(next.EnvVars))
	a.s.warm.Do(func() { go a.s.procs.WarmUp(a.s.log) })
	return connect.NewResponse(&agentv1.InitResponse{Version: Version}), nil
}

func (a *agentService) Exec(ctx context.Context, req *connect.Request[agentv1.ExecRequest], stream *connect.ServerStream[agentv1.ExecEvent]) error {
	timeout := time.Duration(req.Msg.GetTimeoutMs()) * time.Millisecond
	p, replayed, err := a.s.procs.Launch(req.Msg.GetStart(), req.Msg.GetUser(), req.Header(), timeout)
	if err != nil {
		return err
	}
	if replayed {
		stream.ResponseHeader().Set(agentv1.ReplayedHeader, "true")
	}
	// A replayed start streams the command from its start event too (the
	// buffer always keeps it).
	return follow(ctx, p, 0, req, stream)
}

func (a *agentService) Attach(ctx context.Context, req *connect.Request[agentv1.AttachRequest], stream *connect.ServerStream[agentv1.ExecEvent]) error {
	p, err := a.s.procs.Manager().Get(req.Msg.GetProcess())
	if err != nil {
		return process.ConnectError(err)
	}
	return follow(ctx, p, req.Msg.GetAfterSeq(), req, stream)
}

type headered interface{ Header() http.Header }

func follow(ctx context.Context, p *process.Proc, after uint64, req headered, stream *connect.ServerStream[agentv1.ExecEvent]) error {
	return p.Follow(ctx, after, keepalive.Interval(req.Header()), func(e process.Event) error {
		return stream.Send(&agentv1.ExecEvent{Seq: e.Seq, Event: e.Event, Dropped: e.Dropped})
	})
}
