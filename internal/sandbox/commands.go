package sandbox

import (
	"context"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Commands runs commands in sandboxes, through each one's agent: the API
// layers start, attach to, feed and signal them through its methods and
// never see the agent's protocol. Every error is classified (errdefs) here.
type Commands struct {
	agents  Agents
	metrics *Metrics
}

// Agents finds the agent of a running sandbox (Targets); a sandbox that
// is not running is ErrNotFound.
type Agents interface {
	Agent(id string) (*AgentConn, error)
}

// NewCommands runs commands through the agents of agents; metrics (nil:
// none) times their starts.
func NewCommands(agents Agents, metrics *Metrics) *Commands {
	return &Commands{agents: agents, metrics: metrics}
}

// CommandSpec is a command to start in a sandbox.
type CommandSpec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	Argv []string
	Env  map[string]string
	// Cwd is the working directory ("": the user's home).
	Cwd string
	// User is the Linux user it runs as ("": the sandbox's default user).
	User string
	// Tag names the command in listings.
	Tag string
	// Stdin keeps a pipe to its stdin open (for SendStdin); without it
	// stdin is /dev/null.
	Stdin bool
	// Timeout kills the command after it (0: none).
	Timeout time.Duration
	// PTY runs it on a terminal of this size (nil: on pipes).
	PTY *PTYSize
	// Key is the client's idempotency key ("": none): a start with the key
	// of a command still known to the agent (running, or ended in the
	// last 10 minutes) starts nothing and streams that command
	// (CommandStream.Replayed). The same key with another command is
	// ErrAlreadyExists.
	Key string
}

// PTYSize is a terminal's size in characters.
type PTYSize struct {
	Cols, Rows uint32
}

// CommandInfo is a command that is running in a sandbox.
type CommandInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Cwd  string
}

// StartCommand starts a command and returns its events, the first of which
// is CommandStarted. The command outlives ctx: ctx ends the stream only.
func (c *Commands) StartCommand(ctx context.Context, id string, spec CommandSpec) (*CommandStream, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "a command needs a program to run")
	}
	start := time.Now()
	agent, err := c.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	cs, err := agent.startCommand(ctx, spec)
	if err == nil {
		c.metrics.execStarted(time.Since(start), spec.PTY != nil)
	}
	return cs, err
}

// AttachCommand returns the events of a running (or just ended) command
// from the one after afterSeq on (0: from its first kept event).
func (c *Commands) AttachCommand(ctx context.Context, id string, pid uint32, afterSeq uint64) (*CommandStream, error) {
	agent, err := c.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	stream, err := agent.Agent.Attach(ctx, connect.NewRequest(&agentv1.AttachRequest{Process: selectPID(pid), AfterSeq: afterSeq}))
	if err != nil {
		return nil, fromAgent(err)
	}
	return &CommandStream{agent: agent, pid: pid, stream: stream}, nil
}

// ListCommands lists the commands running in a sandbox.
func (c *Commands) ListCommands(ctx context.Context, id string) ([]CommandInfo, error) {
	agent, err := c.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	resp, err := agent.Process.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		return nil, fromAgent(err)
	}
	var out []CommandInfo
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, CommandInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}

// SendStdin writes data to a command's stdin (or its terminal).
func (c *Commands) SendStdin(ctx context.Context, id string, pid uint32, data []byte) error {
	agent, err := c.agents.Agent(id)
	if err != nil {
		return err
	}
	return agent.sendInput(ctx, pid, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}})
}

// CloseStdin closes a command's stdin, so it reads EOF.
func (c *Commands) CloseStdin(ctx context.Context, id string, pid uint32) error {
	agent, err := c.agents.Agent(id)
	if err != nil {
		return err
	}
	return agent.closeStdin(ctx, pid)
}

// SignalCommand sends a command SIGTERM or SIGKILL.
func (c *Commands) SignalCommand(ctx context.Context, id string, pid uint32, sig syscall.Signal) error {
	agent, err := c.agents.Agent(id)
	if err != nil {
		return err
	}
	return agent.signal(ctx, pid, sig)
}

func (a *AgentConn) startCommand(ctx context.Context, spec CommandSpec) (*CommandStream, error) {
	cfg := &process.ProcessConfig{Cmd: spec.Argv[0], Args: spec.Argv[1:], Envs: spec.Env}
	if spec.Cwd != "" {
		cfg.Cwd = &spec.Cwd
	}
	start := &process.StartRequest{Process: cfg, Stdin: &spec.Stdin}
	if spec.Tag != "" {
		start.Tag = &spec.Tag
	}
	if spec.PTY != nil {
		start.Pty = &process.PTY{Size: &process.PTY_Size{Cols: spec.PTY.Cols, Rows: spec.PTY.Rows}}
	}
	msg := &agentv1.ExecRequest{Start: start, TimeoutMs: uint32(spec.Timeout.Milliseconds()), User: spec.User}
	// Every start carries a key (the caller's, or spaced's own): the agent
	// starts a key's command once, so a start whose connection died before
	// its first event (a kept-alive connection closed under it) is sent
	// again, once, and streams the process the first one started if it
	// did.
	key := spec.Key
	if key == "" {
		key = "spaced-" + newID()
	}
	var stream *connect.ServerStreamForClient[agentv1.ExecEvent]
	for try := 0; ; try++ {
		req := connect.NewRequest(msg)
		req.Header().Set(agentv1.IdempotencyKeyHeader, key)
		var err error
		if stream, err = a.Agent.Exec(ctx, req); err != nil {
			return nil, fromAgent(err)
		}
		if stream.Receive() {
			break
		}
		err = stream.Err()
		stream.Close()
		if try == 0 && connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil {
			continue
		}
		if err = fromAgent(err); err == nil {
			err = errdefs.New(errdefs.ErrUnavailable, "sandbox agent sent no start event")
		}
		return nil, err
	}
	first := stream.Msg()
	if first.GetEvent().GetStart() == nil {
		stream.Close()
		return nil, errdefs.New(errdefs.ErrUnavailable, "sandbox agent sent no start event")
	}
	return &CommandStream{agent: a, pid: first.GetEvent().GetStart().GetPid(), stream: stream, first: first,
		replayed: stream.ResponseHeader().Get(agentv1.ReplayedHeader) == "true"}, nil
}

func selectPID(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

func (a *AgentConn) sendInput(ctx context.Context, pid uint32, in *process.ProcessInput) error {
	_, err := a.Process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: selectPID(pid), Input: in}))
	return fromAgent(err)
}

func (a *AgentConn) closeStdin(ctx context.Context, pid uint32) error {
	_, err := a.Process.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: selectPID(pid)}))
	return fromAgent(err)
}

func (a *AgentConn) signal(ctx context.Context, pid uint32, sig syscall.Signal) error {
	var s process.Signal
	switch sig {
	case syscall.SIGTERM:
		s = process.Signal_SIGNAL_SIGTERM
	case syscall.SIGKILL:
		s = process.Signal_SIGNAL_SIGKILL
	default:
		return errdefs.New(errdefs.ErrInvalidArgument, "signal must be SIGTERM or SIGKILL")
	}
	_, err := a.Process.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: selectPID(pid), Signal: s}))
	return fromAgent(err)
}

func (a *AgentConn) resize(ctx context.Context, pid uint32, size PTYSize) error {
	_, err := a.Process.Update(ctx, connect.NewRequest(&process.UpdateRequest{
		Process: selectPID(pid), Pty: &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	}))
	return fromAgent(err)
}
