package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/spacesandbox/space/client/apitypes"
)

// Code event types: one per line of the code interpreter (see runCode in
// api/openapi.yaml).
const (
	CodeEventExecution = "execution" // first: the execution's id
	CodeEventCount     = "number_of_executions"
	CodeEventStdout    = "stdout"
	CodeEventStderr    = "stderr"
	CodeEventResult    = "result"
	CodeEventError     = "error" // the cell raised (not the stream's error)
	// CodeEventGap says Dropped older events were dropped from the
	// interpreter's log before a resumed stream could replay them.
	CodeEventGap = "gap"
	CodeEventEnd = "end_of_execution"
	// CodeEventUnexpectedEnd ends an execution whose kernel died (after an
	// error event).
	CodeEventUnexpectedEnd = "unexpected_end_of_execution"
)

// codeStreamError is the daemon's event when it lost the interpreter's
// stream; the connection closes after it.
const codeStreamError = "stream_error"

// CodeRequest is the body of POST /v1/sandboxes/{id}/code.
type CodeRequest = apitypes.CodeRequest

// CodeEvent is one event of a cell's stream.
type CodeEvent struct {
	ID   uint64 // the line's seq: only goes up
	Type string // one of the CodeEvent* constants
	// ExecutionID is the execution's id, on every event.
	ExecutionID string
	// Text is the output of stdout and stderr events.
	Text string
	// ExecutionCount is set on number_of_executions events.
	ExecutionCount int
	Result         *CodeResult // result events
	Error          *CodeError  // error events
	Dropped        int         // gap events
	// Data is the event's JSON as the daemon sent it.
	Data json.RawMessage
}

// End reports whether e is the last event of its execution.
func (e CodeEvent) End() bool { return e.Type == CodeEventEnd || e.Type == CodeEventUnexpectedEnd }

// CodeResult is a rich result: each format the value has. PNG, JPEG and
// PDF are base64 (see Bytes); JSON, Data (a pandas DataFrame) and Chart (a
// matplotlib figure) are JSON; Extra holds other MIME types.
type CodeResult struct {
	Text         string
	HTML         string
	Markdown     string
	SVG          string
	PNG          string
	JPEG         string
	PDF          string
	LaTeX        string
	JSON         json.RawMessage
	JavaScript   string
	Data         json.RawMessage
	Chart        json.RawMessage
	Extra        map[string]json.RawMessage
	IsMainResult bool // the value of the cell's last expression
}

// Formats names the formats r has, as E2B's SDKs do.
func (r *CodeResult) Formats() []string {
	var out []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"text", r.Text != ""}, {"html", r.HTML != ""}, {"markdown", r.Markdown != ""}, {"svg", r.SVG != ""},
		{"png", r.PNG != ""}, {"jpeg", r.JPEG != ""}, {"pdf", r.PDF != ""}, {"latex", r.LaTeX != ""},
		{"json", len(r.JSON) > 0}, {"javascript", r.JavaScript != ""}, {"data", len(r.Data) > 0},
		{"chart", len(r.Chart) > 0},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	return out
}

// Bytes returns the decoded content of a binary format (png, jpeg, pdf)
// or the text of svg; ok is false when r does not have it.
func (r *CodeResult) Bytes(format string) ([]byte, bool, error) {
	var b64 string
	switch format {
	case "png":
		b64 = r.PNG
	case "jpeg":
		b64 = r.JPEG
	case "pdf":
		b64 = r.PDF
	case "svg":
		return []byte(r.SVG), r.SVG != "", nil
	default:
		return nil, false, fmt.Errorf("format %q is not one of png, jpeg, pdf, svg", format)
	}
	if b64 == "" {
		return nil, false, nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, true, fmt.Errorf("%s result: %w", format, err)
	}
	return b, true, nil
}

// CodeError is an exception the cell raised.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (e *CodeError) Error() string { return e.Name + ": " + e.Value }

// Execution is one cell run as the code interpreter keeps it.
type Execution = apitypes.Execution

// CodeContext is a code interpreter context: a kernel with its own
// variables, language and working directory.
type CodeContext = apitypes.CodeContext

// CodeContextRequest is a new context; empty fields take the defaults
// (python, the kernel user's home).
type CodeContextRequest = apitypes.CreateCodeContextJSONBody

// RunCode runs a cell in the sandbox's code interpreter and returns its
// event stream: execution (with the id), then output, results and errors,
// then the end. If the connection breaks, Next returns an error; the cell
// keeps running. Resume with CodeEvents(ctx, id, s.ExecutionID(),
// s.LastEventID()), or use RunCodeResumable.
func (c *Client) RunCode(ctx context.Context, id string, req CodeRequest) (*CodeStream, error) {
	return c.RunCodeResumable(ctx, id, req, ResumeOptions{})
}

// RunCodeResumable is RunCode whose stream reconnects by itself, sending
// Last-Event-ID, when the connection breaks after the execution event.
func (c *Client) RunCodeResumable(ctx context.Context, id string, req CodeRequest, ro ResumeOptions) (*CodeStream, error) {
	u, err := c.endpoint(nil, "v1", "sandboxes", id, "code")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, fmt.Errorf("run code in %s: %w", id, err)
	}
	return newCodeStream(ctx, c, id, "", 0, resp.Body, ro), nil
}

// CodeEvents opens the event stream of an execution, replaying the events
// after afterID (0 for all the interpreter keeps). If older events were
// dropped, the first is a gap. The stream of an execution whose end the
// caller had already ends at once (io.EOF).
func (c *Client) CodeEvents(ctx context.Context, id, executionID string, afterID uint64) (*CodeStream, error) {
	return c.CodeEventsResumable(ctx, id, executionID, afterID, ResumeOptions{})
}

// CodeEventsResumable is CodeEvents whose stream reconnects by itself.
func (c *Client) CodeEventsResumable(ctx context.Context, id, executionID string, afterID uint64, ro ResumeOptions) (*CodeStream, error) {
	body, err := c.openCodeEvents(ctx, id, executionID, afterID)
	if err != nil {
		return nil, fmt.Errorf("events of execution %s in %s: %w", executionID, id, err)
	}
	s := newCodeStream(ctx, c, id, executionID, afterID, body, ro)
	s.resumed = true
	return s, nil
}

func (c *Client) openCodeEvents(ctx context.Context, id, executionID string, afterID uint64) (io.ReadCloser, error) {
	u, err := c.endpoint(nil, "v1", "sandboxes", id, "code", executionID, "events")
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if afterID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(afterID, 10))
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// InterruptCode interrupts an execution (as KeyboardInterrupt); its stream
// ends soon after with the cell's error and the end. Interrupting a
// finished execution does nothing.
func (c *Client) InterruptCode(ctx context.Context, id, executionID string) (*Execution, error) {
	var out Execution
	if err := c.call(ctx, http.MethodPost, nil, nil, &out, "v1", "sandboxes", id, "code", executionID, "interrupt"); err != nil {
		return nil, fmt.Errorf("interrupt execution %s in %s: %w", executionID, id, err)
	}
	return &out, nil
}

// ListExecutions returns the executions the sandbox's interpreter keeps,
// oldest first.
func (c *Client) ListExecutions(ctx context.Context, id string) ([]Execution, error) {
	var out struct {
		Executions []Execution `json:"executions"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "sandboxes", id, "code"); err != nil {
		return nil, fmt.Errorf("list executions in %s: %w", id, err)
	}
	return out.Executions, nil
}

// ListCodeContexts returns the interpreter's contexts, the default one too.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	var out struct {
		Contexts []CodeContext `json:"contexts"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "sandboxes", id, "contexts"); err != nil {
		return nil, fmt.Errorf("list code contexts in %s: %w", id, err)
	}
	return out.Contexts, nil
}

// CreateCodeContext starts a context and returns it once its kernel is up.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req CodeContextRequest) (*CodeContext, error) {
	var out CodeContext
	if err := c.call(ctx, http.MethodPost, nil, req, &out, "v1", "sandboxes", id, "contexts"); err != nil {
		return nil, fmt.Errorf("create code context in %s: %w", id, err)
	}
	return &out, nil
}

// DeleteCodeContext stops a context's kernel; a cell running there ends.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "sandboxes", id, "contexts", contextID); err != nil {
		return fmt.Errorf("delete code context %s in %s: %w", contextID, id, err)
	}
	return nil
}

// RestartCodeContext gives a context a new kernel: its variables are gone.
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) error {
	if err := c.call(ctx, http.MethodPost, nil, nil, nil, "v1", "sandboxes", id, "contexts", contextID, "restart"); err != nil {
		return fmt.Errorf("restart code context %s in %s: %w", contextID, id, err)
	}
	return nil
}

// CodeStream is the event stream of one execution. Call Next until it
// returns io.EOF (after the end event) or another error; then, or to stop
// early, Close. Closing it does not stop the cell (see InterruptCode).
type CodeStream struct {
	c         *Client
	ctx       context.Context
	sandboxID string
	resume    ResumeOptions

	conn

	execID    string
	lastID    uint64
	resumed   bool // from CodeEvents: may end without events
	seen      bool // an event came on this connection
	ended     bool
	serverErr string
}

func newCodeStream(ctx context.Context, c *Client, sandboxID, execID string, after uint64, body io.ReadCloser, ro ResumeOptions) *CodeStream {
	return &CodeStream{c: c, ctx: ctx, sandboxID: sandboxID, execID: execID, lastID: after,
		conn: newConn(body), resume: ro}
}

// ExecutionID is the execution's id, "" until the execution event was
// read (for RunCode).
func (s *CodeStream) ExecutionID() string { return s.execID }

// LastEventID is the id of the last event returned by Next; pass it to
// CodeEvents to resume after it.
func (s *CodeStream) LastEventID() uint64 { return s.lastID }

// Next returns the next event; io.EOF once the end event has been
// returned. Heartbeats are skipped. It is not safe to call from several
// goroutines.
func (s *CodeStream) Next() (CodeEvent, error) {
	for {
		if s.ended {
			return CodeEvent{}, io.EOF
		}
		ev, err := s.nextRaw()
		if err == nil || errors.Is(err, io.EOF) {
			return ev, err
		}
		if !s.resumable(err) {
			return CodeEvent{}, err
		}
		if rerr := s.reconnect(err); rerr != nil {
			return CodeEvent{}, rerr
		}
	}
}

func (s *CodeStream) nextRaw() (CodeEvent, error) {
	for {
		raw, err := s.sse.next()
		if err != nil {
			if errors.Is(err, io.EOF) && s.resumed && !s.seen && s.serverErr == "" {
				// Events after an id past the end: the caller had it all.
				s.ended = true
				return CodeEvent{}, io.EOF
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the server closed before the end event
			}
			if s.serverErr != "" {
				err = fmt.Errorf("%s: %w", s.serverErr, err)
				s.serverErr = ""
			}
			if cerr := s.ctx.Err(); cerr != nil {
				err = cerr
			}
			return CodeEvent{}, fmt.Errorf("execution %s stream: %w", s.label(), err)
		}
		if raw.Event == codeStreamError {
			var d struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal([]byte(raw.Data), &d)
			s.serverErr = "daemon: " + d.Message
			continue
		}
		ev, err := decodeCodeEvent(raw)
		if err != nil {
			return CodeEvent{}, fmt.Errorf("execution %s stream: %w", s.label(), err)
		}
		s.seen = true
		if ev.ID != 0 && ev.ID <= s.lastID {
			continue // replayed after a resume: already returned
		}
		if ev.ID != 0 {
			s.lastID = ev.ID
		}
		if ev.Type == CodeEventExecution && ev.ExecutionID != "" {
			s.execID = ev.ExecutionID
		}
		ev.ExecutionID = s.execID
		if ev.End() {
			s.ended = true
		}
		return ev, nil
	}
}

func (s *CodeStream) label() string {
	if s.execID == "" {
		return "(not started)"
	}
	return s.execID
}

func (s *CodeStream) resumable(err error) bool {
	var apiErr *APIError
	return s.resume.Retries > 0 && s.execID != "" && s.ctx.Err() == nil &&
		!errors.As(err, &apiErr) && !s.isClosed()
}

// reconnect opens the events route after the last id, retrying with
// backoff.
func (s *CodeStream) reconnect(cause error) error {
	err := s.conn.reconnect(s.ctx, s.resume, cause, func() (io.ReadCloser, error) {
		return s.c.openCodeEvents(s.ctx, s.sandboxID, s.execID, s.lastID)
	})
	switch {
	case err == nil:
		s.resumed, s.seen = true, false
		return nil
	case errors.Is(err, errStreamClosed):
		return fmt.Errorf("execution %s stream: closed", s.execID)
	case s.ctx.Err() != nil:
		return fmt.Errorf("resume execution %s: %w", s.execID, s.ctx.Err())
	}
	return fmt.Errorf("resume execution %s after event %d: %w (stream broke: %v)", s.execID, s.lastID, err, cause)
}

// Close ends the stream, not the cell. It may be called from another
// goroutine to interrupt a blocked Next.
func (s *CodeStream) Close() error { return s.conn.Close() }

// codeLine holds the keys of every line type (see api/openapi.yaml);
// the formats of a result are kept raw, since a kernel may send any JSON.
type codeLine struct {
	Type           string                     `json:"type"`
	ID             string                     `json:"id"`
	Text           json.RawMessage            `json:"text"`
	ExecutionCount int                        `json:"execution_count"`
	Name           string                     `json:"name"`
	Value          string                     `json:"value"`
	Traceback      string                     `json:"traceback"`
	Dropped        int                        `json:"dropped"`
	HTML           json.RawMessage            `json:"html"`
	Markdown       json.RawMessage            `json:"markdown"`
	SVG            json.RawMessage            `json:"svg"`
	PNG            json.RawMessage            `json:"png"`
	JPEG           json.RawMessage            `json:"jpeg"`
	PDF            json.RawMessage            `json:"pdf"`
	LaTeX          json.RawMessage            `json:"latex"`
	JSON           json.RawMessage            `json:"json"`
	JavaScript     json.RawMessage            `json:"javascript"`
	Data           json.RawMessage            `json:"data"`
	Chart          json.RawMessage            `json:"chart"`
	Extra          map[string]json.RawMessage `json:"extra"`
	IsMainResult   bool                       `json:"is_main_result"`
}

// text is a format as text: a JSON string's value, or the JSON itself.
func text(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func decodeCodeEvent(ev sseEvent) (CodeEvent, error) {
	out := CodeEvent{Type: ev.Event, Data: json.RawMessage(ev.Data)}
	if ev.HasID && ev.ID != "" {
		id, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil {
			return CodeEvent{}, fmt.Errorf("event id %q: %w", ev.ID, err)
		}
		out.ID = id
	}
	var l codeLine
	if err := json.Unmarshal([]byte(ev.Data), &l); err != nil {
		return CodeEvent{}, fmt.Errorf("%s event %s: %w", ev.Event, ev.ID, err)
	}
	switch ev.Event {
	case CodeEventExecution:
		out.ExecutionID = l.ID
	case CodeEventCount:
		out.ExecutionCount = l.ExecutionCount
	case CodeEventStdout, CodeEventStderr:
		out.Text = text(l.Text)
	case CodeEventError:
		out.Error = &CodeError{Name: l.Name, Value: l.Value, Traceback: l.Traceback}
	case CodeEventGap:
		out.Dropped = l.Dropped
	case CodeEventResult:
		out.Result = &CodeResult{
			Text: text(l.Text), HTML: text(l.HTML), Markdown: text(l.Markdown), SVG: text(l.SVG),
			PNG: text(l.PNG), JPEG: text(l.JPEG), PDF: text(l.PDF), LaTeX: text(l.LaTeX),
			JSON: nonNull(l.JSON), JavaScript: text(l.JavaScript), Data: nonNull(l.Data), Chart: nonNull(l.Chart),
			Extra: l.Extra, IsMainResult: l.IsMainResult,
		}
	}
	return out, nil
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}
