package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/coderun"
	"github.com/spacesandbox/space/internal/errdefs"
)

// CodeRunner runs cells in the code interpreters of sandboxes
// (coderun.Client).
type CodeRunner interface {
	Execute(ctx context.Context, sandboxID string, req coderun.ExecuteRequest) (*coderun.Stream, error)
	Events(ctx context.Context, sandboxID, executionID string, after uint64) (*coderun.Stream, error)
	Interrupt(ctx context.Context, sandboxID, executionID string) (coderun.Execution, error)
	Executions(ctx context.Context, sandboxID string) ([]coderun.Execution, error)
	Contexts(ctx context.Context, sandboxID string) ([]coderun.Context, error)
	CreateContext(ctx context.Context, sandboxID string, req coderun.ContextRequest) (coderun.Context, error)
	DeleteContext(ctx context.Context, sandboxID, contextID string) error
	RestartContext(ctx context.Context, sandboxID, contextID string) error
}

type codeRequest struct {
	Code           string            `json:"code"`
	Language       string            `json:"language"`
	ContextID      string            `json:"context_id"`
	Env            map[string]string `json:"env"`
	TimeoutSeconds int               `json:"timeout_seconds"`
}

type executionJSON struct {
	ID        string     `json:"id"`
	ContextID string     `json:"context_id"`
	State     string     `json:"state"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

func toExecutionJSON(e coderun.Execution) executionJSON {
	return executionJSON{ID: e.ID, ContextID: e.ContextID, State: e.State, StartedAt: e.StartedAt, EndedAt: e.EndedAt}
}

type codeContextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// runCode starts a cell and streams its lines as SSE. A client that goes
// away does not interrupt the cell: it resumes with commandEvents' rules
// (Last-Event-ID) at GET .../code/{execution}/events.
func (s *Server) RunCode(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req codeRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	stream, err := s.code.Execute(r.Context(), id, coderun.ExecuteRequest{
		Code: req.Code, Language: req.Language, ContextID: req.ContextID, Env: req.Env, TimeoutSeconds: req.TimeoutSeconds,
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer stream.Close()
	relayCode(r.Context(), w, stream)
}

func (s *Server) CodeEvents(w http.ResponseWriter, r *http.Request, id native.SandboxID, execution native.ExecutionID, params native.CodeEventsParams) {
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	var afterSeq uint64
	if after != "" {
		var err error
		if afterSeq, err = strconv.ParseUint(after, 10, 64); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "Last-Event-ID %q is not an event id", after))
			return
		}
	}
	stream, err := s.code.Events(r.Context(), id, execution, afterSeq)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer stream.Close()
	relayCode(r.Context(), w, stream)
}

// codeStreamError is the event a code stream ends with when spaced lost
// the interpreter's stream before the end line ("error" is a cell's).
const codeStreamError = "stream_error"

// relayCode writes each line of stream as one SSE event (id: its seq,
// event: its type, data: the line), until the end line or the client
// goes away. The interpreter's keepalives are not relayed: the SSE
// writer's heartbeats cover quiet.
func relayCode(ctx context.Context, w http.ResponseWriter, stream *coderun.Stream) {
	sse := newSSE(w)
	defer sse.Close()
	for {
		l, err := stream.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if msg, ok := revoked(ctx); ok {
			data, _ := json.Marshal(map[string]string{"message": msg})
			sse.Event(0, codeStreamError, data)
			return
		}
		if errors.Is(err, context.Canceled) {
			return // the client went away; the cell runs on
		}
		if err != nil {
			data, _ := json.Marshal(map[string]string{"message": errdefs.PublicMessage(err) + "; resume with Last-Event-ID"})
			sse.Event(0, codeStreamError, data)
			return
		}
		if err := sse.Event(l.Seq, l.Type, l.Raw); err != nil {
			return
		}
	}
}

func (s *Server) InterruptCode(w http.ResponseWriter, r *http.Request, id native.SandboxID, execution native.ExecutionID) {
	e, err := s.code.Interrupt(r.Context(), id, execution)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toExecutionJSON(e))
}

func (s *Server) ListExecutions(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	list, err := s.code.Executions(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Executions []executionJSON `json:"executions"`
	}{Executions: []executionJSON{}}
	for _, e := range list {
		out.Executions = append(out.Executions, toExecutionJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) ListCodeContexts(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	list, err := s.code.Contexts(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Contexts []codeContextJSON `json:"contexts"`
	}{Contexts: []codeContextJSON{}}
	for _, c := range list {
		out.Contexts = append(out.Contexts, codeContextJSON(c))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) CreateCodeContext(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	c, err := s.code.CreateContext(r.Context(), id, coderun.ContextRequest{Language: req.Language, Cwd: req.Cwd})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, codeContextJSON(c))
}

func (s *Server) DeleteCodeContext(w http.ResponseWriter, r *http.Request, id native.SandboxID, contextID native.ContextID) {
	if err := s.code.DeleteContext(r.Context(), id, contextID); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) RestartCodeContext(w http.ResponseWriter, r *http.Request, id native.SandboxID, contextID native.ContextID) {
	if err := s.code.RestartContext(r.Context(), id, contextID); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
