package sandbox

import (
	"context"
	"syscall"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
)

// CommandEventKind says what a CommandEvent carries.
type CommandEventKind int

const (
	// CommandKeepalive carries nothing but a sign of life (and maybe
	// Dropped).
	CommandKeepalive CommandEventKind = iota
	// CommandStarted carries the command's PID.
	CommandStarted
	// CommandStdout, CommandStderr and CommandPTY carry output in Data.
	CommandStdout
	CommandStderr
	CommandPTY
	// CommandEnded carries how it ended in End; it is the last event.
	CommandEnded
)

// CommandEvent is one event of a command. Seq numbers the events of one
// command, going up; a client resumes after the last one it saw.
type CommandEvent struct {
	Seq uint64
	// Dropped counts the events lost just before this one (a reader that
	// fell behind the agent's buffer).
	Dropped uint64
	Kind    CommandEventKind
	PID     uint32
	Data    []byte
	End     CommandEnd
}

// CommandEnd is how a command ended.
type CommandEnd struct {
	ExitCode int32
	// Exited: it exited by itself (else a signal ended it, or it never
	// started, with Error saying why).
	Exited bool
	Status string
	Error  string
}

// CommandStream is a command's events, read with Next and Event as they
// come, and the command's stdin, terminal and signals.
type CommandStream struct {
	agent  *AgentConn
	pid    uint32
	stream *connect.ServerStreamForClient[agentv1.ExecEvent]
	// first is the start event StartCommand read, handed out first.
	first *agentv1.ExecEvent
	ev    CommandEvent
	ended bool
	// replayed: the start found its idempotency key's earlier command.
	replayed bool
}

// PID is the command's process id in the sandbox.
func (c *CommandStream) PID() uint32 { return c.pid }

// Replayed reports a start that found the command its idempotency key
// started earlier (CommandSpec.Key): nothing was started, and this
// stream is that command's from its start.
func (c *CommandStream) Replayed() bool { return c.replayed }

// Next waits for the next event; false when the stream has ended (Err says
// why, nil after the end event).
func (c *CommandStream) Next() bool {
	msg := c.first
	c.first = nil
	if msg == nil {
		if !c.stream.Receive() {
			return false
		}
		msg = c.stream.Msg()
	}
	c.ev = commandEvent(msg)
	c.ended = c.ev.Kind == CommandEnded
	return true
}

// Event is the event Next got.
func (c *CommandStream) Event() CommandEvent { return c.ev }

// Err is why the stream ended before the command's end event, classified.
func (c *CommandStream) Err() error { return fromAgent(c.stream.Err()) }

// Close ends the stream (not the command).
func (c *CommandStream) Close() error {
	if c.ended {
		c.drain()
	}
	return c.stream.Close()
}

// SendStdin writes data to the command's stdin.
func (c *CommandStream) SendStdin(ctx context.Context, data []byte) error {
	return c.agent.sendInput(ctx, c.pid, &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}})
}

// CloseStdin closes the command's stdin, so it reads EOF.
func (c *CommandStream) CloseStdin(ctx context.Context) error { return c.agent.closeStdin(ctx, c.pid) }

// SendPTY writes data to the command's terminal, as typed keys.
func (c *CommandStream) SendPTY(ctx context.Context, data []byte) error {
	return c.agent.sendInput(ctx, c.pid, &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}})
}

// ResizePTY changes the size of the command's terminal.
func (c *CommandStream) ResizePTY(ctx context.Context, size PTYSize) error {
	return c.agent.resize(ctx, c.pid, size)
}

// Signal sends the command SIGTERM or SIGKILL.
func (c *CommandStream) Signal(ctx context.Context, sig syscall.Signal) error {
	return c.agent.signal(ctx, c.pid, sig)
}

// drain reads what follows a command's end event, the stream's own end, so
// the response body is read to EOF: connect-go closes a body that was not,
// and net/http then drops the connection to the agent with it, so every
// command dialled a new TCP connection through the sandbox's netstack.
func (c *CommandStream) drain() {
	for range 4 {
		if !c.stream.Receive() {
			return
		}
	}
}

func commandEvent(msg *agentv1.ExecEvent) CommandEvent {
	ev := CommandEvent{Seq: msg.GetSeq(), Dropped: msg.GetDropped()}
	pe := msg.GetEvent()
	switch {
	case pe.GetStart() != nil:
		ev.Kind, ev.PID = CommandStarted, pe.GetStart().GetPid()
	case pe.GetData() != nil:
		d := pe.GetData()
		switch {
		case d.GetStdout() != nil:
			ev.Kind, ev.Data = CommandStdout, d.GetStdout()
		case d.GetStderr() != nil:
			ev.Kind, ev.Data = CommandStderr, d.GetStderr()
		case d.GetPty() != nil:
			ev.Kind, ev.Data = CommandPTY, d.GetPty()
		}
	case pe.GetEnd() != nil:
		e := pe.GetEnd()
		ev.Kind, ev.End = CommandEnded, CommandEnd{ExitCode: e.GetExitCode(), Exited: e.GetExited(), Status: e.GetStatus(), Error: e.GetError()}
	}
	return ev
}
