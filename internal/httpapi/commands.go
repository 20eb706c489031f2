package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

type commandRequest struct {
	Cmd            string            `json:"cmd"`
	Argv           []string          `json:"argv"`
	Env            map[string]string `json:"env"`
	Cwd            string            `json:"cwd"`
	User           string            `json:"user"`
	Stdin          *string           `json:"stdin"`
	KeepStdinOpen  bool              `json:"keep_stdin_open"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	Background     bool              `json:"background"`
	Tag            string            `json:"tag"`
}

type commandJSON struct {
	PID  uint32   `json:"pid"`
	Tag  string   `json:"tag,omitempty"`
	Cmd  string   `json:"cmd,omitempty"`
	Args []string `json:"args,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

func (c *commandRequest) toExec() (*agentv1.ExecRequest, error) {
	cfg := &process.ProcessConfig{Envs: c.Env}
	switch {
	case c.Cmd != "" && len(c.Argv) > 0:
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "give either cmd or argv, not both")
	case c.Cmd != "":
		cfg.Cmd, cfg.Args = "/bin/sh", []string{"-c", c.Cmd}
	case len(c.Argv) > 0 && c.Argv[0] != "":
		cfg.Cmd, cfg.Args = c.Argv[0], c.Argv[1:]
	default:
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "cmd or argv is required")
	}
	if c.Cwd != "" {
		cfg.Cwd = &c.Cwd
	}
	if c.TimeoutSeconds < 0 || c.TimeoutSeconds > 7*24*3600 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds must be between 0 and 604800")
	}
	stdin := c.Stdin != nil || c.KeepStdinOpen
	start := &process.StartRequest{Process: cfg, Stdin: &stdin}
	if c.Tag != "" {
		start.Tag = &c.Tag
	}
	return &agentv1.ExecRequest{Start: start, TimeoutMs: uint32(c.TimeoutSeconds) * 1000, User: c.User}, nil
}

func pidParam(r *http.Request) (uint32, error) {
	n, err := strconv.ParseUint(r.PathValue("pid"), 10, 32)
	if err != nil || n == 0 {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "pid %q is not a positive integer", r.PathValue("pid"))
	}
	return uint32(n), nil
}

func (s *Server) runCommand(w http.ResponseWriter, r *http.Request) {
	var req commandRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	exec, err := req.toExec()
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	// The process outlives this request (a client may reconnect to it), so
	// the stream is cancelled when we stop reading, never the process.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := agent.Agent.Exec(ctx, connect.NewRequest(exec))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer stream.Close()
	if !stream.Receive() {
		writeError(w, r, fromAgent(stream.Err()))
		return
	}
	first := stream.Msg()
	startEv := first.GetEvent().GetStart()
	if startEv == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "sandbox agent sent no start event"))
		return
	}
	pid := startEv.GetPid()
	if req.Stdin != nil {
		sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
		if *req.Stdin != "" {
			if _, err := agent.Process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
				Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(*req.Stdin)}},
			})); err != nil {
				writeError(w, r, fromAgent(err))
				return
			}
		}
		if !req.KeepStdinOpen {
			if _, err := agent.Process.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
				writeError(w, r, fromAgent(err))
				return
			}
		}
	}
	if req.Background {
		writeJSON(w, http.StatusCreated, commandJSON{PID: pid, Tag: req.Tag, Cmd: exec.Start.Process.Cmd, Args: exec.Start.Process.Args, Cwd: req.Cwd})
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	if err := writeExecEvent(sse, first); err != nil {
		return
	}
	streamEvents(r.Context(), sse, stream)
}

// execStream is what Exec and Attach return.
type execStream interface {
	Receive() bool
	Msg() *agentv1.ExecEvent
	Err() error
}

// streamEvents relays the agent's events until the end event or until the
// client goes away.
func streamEvents(ctx context.Context, sse *sseWriter, stream execStream) {
	for stream.Receive() {
		ev := stream.Msg()
		if err := writeExecEvent(sse, ev); err != nil {
			return
		}
		if ev.GetEvent().GetEnd() != nil {
			drainStream(stream)
			return
		}
	}
	msg := "the command's event stream ended early"
	if m, ok := revoked(ctx); ok {
		msg = m
	} else if err := stream.Err(); err != nil {
		msg = errdefs.PublicMessage(fromAgent(err))
	}
	data, _ := json.Marshal(map[string]string{"message": msg})
	sse.Event(0, "error", data)
}

// drainStream reads what follows a command's end event, the stream's own
// end, so the response body is read to EOF: connect-go closes a body that
// was not, and net/http then drops the connection to the agent with it, so
// every command dialled a new TCP connection through the sandbox's netstack.
func drainStream(stream execStream) {
	for range 4 {
		if !stream.Receive() {
			return
		}
	}
}

type dataJSON struct {
	Text   *string `json:"text,omitempty"`
	Base64 string  `json:"base64,omitempty"`
}

func encodeData(b []byte) []byte {
	var d dataJSON
	if utf8.Valid(b) {
		s := string(b)
		d.Text = &s
	} else {
		d.Base64 = base64.StdEncoding.EncodeToString(b)
	}
	out, _ := json.Marshal(d)
	return out
}

func writeExecEvent(sse *sseWriter, ev *agentv1.ExecEvent) error {
	if ev.GetDropped() > 0 {
		data, _ := json.Marshal(map[string]uint64{"dropped": ev.GetDropped()})
		if err := sse.Event(0, "gap", data); err != nil {
			return err
		}
	}
	pe := ev.GetEvent()
	switch {
	case pe.GetStart() != nil:
		data, _ := json.Marshal(map[string]uint32{"pid": pe.GetStart().GetPid()})
		return sse.Event(ev.GetSeq(), "start", data)
	case pe.GetData() != nil:
		d := pe.GetData()
		switch {
		case d.GetStdout() != nil:
			return sse.Event(ev.GetSeq(), "stdout", encodeData(d.GetStdout()))
		case d.GetStderr() != nil:
			return sse.Event(ev.GetSeq(), "stderr", encodeData(d.GetStderr()))
		case d.GetPty() != nil:
			return sse.Event(ev.GetSeq(), "pty", encodeData(d.GetPty()))
		}
	case pe.GetEnd() != nil:
		e := pe.GetEnd()
		data, _ := json.Marshal(struct {
			ExitCode int32  `json:"exit_code"`
			Exited   bool   `json:"exited"`
			Status   string `json:"status"`
			Error    string `json:"error,omitempty"`
		}{e.GetExitCode(), e.GetExited(), e.GetStatus(), e.GetError()})
		return sse.Event(ev.GetSeq(), "end", data)
	}
	return nil // keepalives: the SSE writer has its own heartbeats
}

func (s *Server) commandEvents(w http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var afterSeq uint64
	if after != "" {
		if afterSeq, err = strconv.ParseUint(after, 10, 64); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "Last-Event-ID %q is not an event id", after))
			return
		}
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	stream, err := agent.Agent.Attach(r.Context(), connect.NewRequest(&agentv1.AttachRequest{
		Process:  &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
		AfterSeq: afterSeq,
	}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer stream.Close()
	// Read the first event before answering, so an unknown pid is a 404
	// rather than an SSE stream that fails.
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			writeError(w, r, fromAgent(err))
			return
		}
		sse := newSSE(w)
		sse.Close()
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	first := stream.Msg()
	if err := writeExecEvent(sse, first); err != nil || first.GetEvent().GetEnd() != nil {
		return
	}
	streamEvents(r.Context(), sse, stream)
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) {
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	resp, err := agent.Process.List(r.Context(), connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	out := struct {
		Commands []commandJSON `json:"commands"`
	}{Commands: []commandJSON{}}
	for _, p := range resp.Msg.GetProcesses() {
		out.Commands = append(out.Commands, commandJSON{
			PID: p.GetPid(), Tag: p.GetTag(), Cmd: p.GetConfig().GetCmd(), Args: p.GetConfig().GetArgs(), Cwd: p.GetConfig().GetCwd(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) sendStdin(w http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req struct {
		Data   string `json:"data"`
		Base64 string `json:"base64"`
		EOF    bool   `json:"eof"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	input := []byte(req.Data)
	if req.Base64 != "" {
		if req.Data != "" {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "give either data or base64, not both"))
			return
		}
		if input, err = base64.StdEncoding.DecodeString(req.Base64); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "base64 is not valid: %v", err))
			return
		}
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	if len(input) > 0 {
		if _, err := agent.Process.SendInput(r.Context(), connect.NewRequest(&process.SendInputRequest{
			Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: input}},
		})); err != nil {
			writeError(w, r, fromAgent(err))
			return
		}
	}
	if req.EOF {
		if _, err := agent.Process.CloseStdin(r.Context(), connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
			writeError(w, r, fromAgent(err))
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) signalCommand(w http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req struct {
		Signal string `json:"signal"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	var sig process.Signal
	switch req.Signal {
	case "SIGTERM", "TERM":
		sig = process.Signal_SIGNAL_SIGTERM
	case "SIGKILL", "KILL":
		sig = process.Signal_SIGNAL_SIGKILL
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "signal must be SIGTERM or SIGKILL"))
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	if _, err := agent.Process.SendSignal(r.Context(), connect.NewRequest(&process.SendSignalRequest{
		Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: sig,
	})); err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// revoked is what a stream says as it ends because its API key was
// revoked (the request's context was cancelled with tenant.ErrRevoked).
func revoked(ctx context.Context) (string, bool) {
	if cause := context.Cause(ctx); errors.Is(cause, tenant.ErrRevoked) {
		return errdefs.PublicMessage(cause), true
	}
	return "", false
}
