package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// commandSpec is what a command request asks to run.
func commandSpec(c *native.CommandRequest) (sandbox.CommandSpec, error) {
	cmd, argv, timeout := deref(c.Cmd), deref(c.Argv), deref(c.TimeoutSeconds)
	spec := sandbox.CommandSpec{Env: deref(c.Env), Cwd: deref(c.Cwd), User: deref(c.User), Tag: deref(c.Tag), Stdin: c.Stdin != nil || deref(c.KeepStdinOpen)}
	switch {
	case cmd != "" && len(argv) > 0:
		return spec, errdefs.New(errdefs.ErrInvalidArgument, "give either cmd or argv, not both")
	case cmd != "":
		spec.Argv = []string{"/bin/sh", "-c", cmd}
	case len(argv) > 0 && argv[0] != "":
		spec.Argv = argv
	default:
		return spec, errdefs.New(errdefs.ErrInvalidArgument, "cmd or argv is required")
	}
	if timeout < 0 || timeout > 7*24*3600 {
		return spec, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds must be between 0 and 604800")
	}
	spec.Timeout = time.Duration(timeout) * time.Second
	return spec, nil
}

func toCommandJSON(pid uint32, tag, cmd string, args []string, cwd string) native.Command {
	return native.Command{Pid: int(pid), Tag: opt(tag), Cmd: opt(cmd), Args: optSlice(args), Cwd: opt(cwd)}
}

// pidParam checks the {pid} the router bound (an integer): the agent's
// pids are positive 32-bit numbers.
func pidParam(pid native.PID) (uint32, error) {
	if pid <= 0 || pid > math.MaxUint32 {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "pid %d is not a positive 32-bit integer", pid)
	}
	return uint32(pid), nil
}

func (s *Server) RunCommand(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.RunCommandParams) {
	var req native.RunCommandJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := commandSpec(&req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	spec.Key = deref(params.IdempotencyKey)
	// The process outlives this request (a client may reconnect to it), so
	// the stream is cancelled when we stop reading, never the process.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := s.commands.StartCommand(ctx, id, spec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer stream.Close()
	if stream.Replayed() {
		// An earlier start with this key started the command and wrote
		// its stdin; this one only answers it.
		w.Header().Set("Idempotent-Replayed", "true")
	} else if req.Stdin != nil {
		if *req.Stdin != "" {
			if err := stream.SendStdin(ctx, []byte(*req.Stdin)); err != nil {
				writeError(w, r, err)
				return
			}
		}
		if !deref(req.KeepStdinOpen) {
			if err := stream.CloseStdin(ctx); err != nil {
				writeError(w, r, err)
				return
			}
		}
	}
	if deref(req.Background) {
		writeJSON(w, http.StatusCreated, toCommandJSON(stream.PID(), spec.Tag, spec.Argv[0], spec.Argv[1:], spec.Cwd))
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	streamEvents(r.Context(), sse, stream)
}

// streamEvents relays a command's events until its end event or until the
// client goes away.
func streamEvents(ctx context.Context, sse *sseWriter, stream *sandbox.CommandStream) {
	for stream.Next() {
		ev := stream.Event()
		if err := writeCommandEvent(sse, ev); err != nil || ev.Kind == sandbox.CommandEnded {
			return
		}
	}
	msg := "the command's event stream ended early"
	if m, ok := revoked(ctx); ok {
		msg = m
	} else if err := stream.Err(); err != nil {
		msg = errdefs.PublicMessage(err)
	}
	data, _ := json.Marshal(map[string]string{"message": msg})
	sse.Event(0, "error", data)
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

func writeCommandEvent(sse *sseWriter, ev sandbox.CommandEvent) error {
	if ev.Dropped > 0 {
		data, _ := json.Marshal(map[string]uint64{"dropped": ev.Dropped})
		if err := sse.Event(0, "gap", data); err != nil {
			return err
		}
	}
	switch ev.Kind {
	case sandbox.CommandStarted:
		data, _ := json.Marshal(map[string]uint32{"pid": ev.PID})
		return sse.Event(ev.Seq, "start", data)
	case sandbox.CommandStdout:
		return sse.Event(ev.Seq, "stdout", encodeData(ev.Data))
	case sandbox.CommandStderr:
		return sse.Event(ev.Seq, "stderr", encodeData(ev.Data))
	case sandbox.CommandPTY:
		return sse.Event(ev.Seq, "pty", encodeData(ev.Data))
	case sandbox.CommandEnded:
		data, _ := json.Marshal(struct {
			ExitCode int32  `json:"exit_code"`
			Exited   bool   `json:"exited"`
			Status   string `json:"status"`
			Error    string `json:"error,omitempty"`
		}{ev.End.ExitCode, ev.End.Exited, ev.End.Status, ev.End.Error})
		return sse.Event(ev.Seq, "end", data)
	}
	return nil // keepalives: the SSE writer has its own heartbeats
}

func (s *Server) CommandEvents(w http.ResponseWriter, r *http.Request, id native.SandboxID, pidNum native.PID, params native.CommandEventsParams) {
	pid, err := pidParam(pidNum)
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
	stream, err := s.commands.AttachCommand(r.Context(), id, pid, afterSeq)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer stream.Close()
	// Read the first event before answering, so an unknown pid is a 404
	// rather than an SSE stream that fails.
	if !stream.Next() {
		if err := stream.Err(); err != nil {
			writeError(w, r, err)
			return
		}
		sse := newSSE(w)
		sse.Close()
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	first := stream.Event()
	if err := writeCommandEvent(sse, first); err != nil || first.Kind == sandbox.CommandEnded {
		return
	}
	streamEvents(r.Context(), sse, stream)
}

func (s *Server) ListCommands(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	commands, err := s.commands.ListCommands(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Commands []native.Command `json:"commands"`
	}{Commands: []native.Command{}}
	for _, c := range commands {
		out.Commands = append(out.Commands, toCommandJSON(c.PID, c.Tag, c.Cmd, c.Args, c.Cwd))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) SendStdin(w http.ResponseWriter, r *http.Request, id native.SandboxID, pidNum native.PID) {
	pid, err := pidParam(pidNum)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req native.SendStdinJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	input, b64, eof := []byte(deref(req.Data)), deref(req.Base64), deref(req.Eof)
	if b64 != "" {
		if len(input) > 0 {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "give either data or base64, not both"))
			return
		}
		if input, err = base64.StdEncoding.DecodeString(b64); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "base64 is not valid: %v", err))
			return
		}
	}
	// An empty write still names a sandbox and a command, which must
	// exist: it answers 404 for what is gone, as any write does.
	if len(input) > 0 || !eof {
		if err := s.commands.SendStdin(r.Context(), id, pid, input); err != nil {
			writeError(w, r, err)
			return
		}
	}
	if eof {
		if err := s.commands.CloseStdin(r.Context(), id, pid); err != nil {
			writeError(w, r, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) SignalCommand(w http.ResponseWriter, r *http.Request, id native.SandboxID, pidNum native.PID) {
	pid, err := pidParam(pidNum)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req native.SignalCommandJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	var sig syscall.Signal
	switch req.Signal {
	case "SIGTERM", "TERM":
		sig = syscall.SIGTERM
	case "SIGKILL", "KILL":
		sig = syscall.SIGKILL
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "signal must be SIGTERM or SIGKILL"))
		return
	}
	if err := s.commands.SignalCommand(r.Context(), id, pid, sig); err != nil {
		writeError(w, r, err)
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
