// Package coderun is spaced's client of the code interpreter inside a
// sandbox (space-interpreter on port 49999, cmd/space-interpreter): it runs
// cells as resumable executions (POST /executions), follows and interrupts
// them, and manages the interpreter's contexts, for the native API's
// /v1/sandboxes/{id}/code and /contexts routes.
//
// It speaks the interpreter's wire (docs/code-interpreter.md, "Resumable
// executions") and nothing of the interpreter's code: that package is
// linked into space-interpreter alone. Every request is sent over the
// sandbox's veth with the sandbox's access token, and every answer that
// is not a success becomes an errdefs class whose message a client may
// see.
package coderun

import (
	"github.com/spacesandbox/space/internal/accesstoken"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Port is where space-interpreter listens inside a sandbox.
const Port = 49999

// DefaultMaxLineBytes bounds one line of an execution: the interpreter's
// default output limit per execution (32 MiB, -max-output-bytes), which
// no single line passes, plus room for the line's own keys.
const DefaultMaxLineBytes = 32<<20 + 1<<20

// maxAnswerBytes bounds a JSON answer (a list of contexts or executions)
// and an error's body, of which only the start is kept.
const (
	maxAnswerBytes = 4 << 20
	maxErrorBytes  = 512
)

// Options configure a Client.
type Options struct {
	// Target finds a running sandbox (sandbox.Targets.Target).
	Target sandbox.TargetFunc
	// Dial connects to a sandbox address; nil is sandbox.DefaultDial.
	Dial sandbox.DialFunc
	// MaxLineBytes bounds one line of an execution's stream; 0 is
	// DefaultMaxLineBytes.
	MaxLineBytes int
}

// Client talks to the code interpreters of the sandboxes on this node. It
// is safe for concurrent use.
type Client struct {
	target  sandbox.TargetFunc
	http    *http.Client
	maxLine int
}

// New returns a Client.
func New(o Options) *Client {
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	return &Client{
		target: o.Target,
		// No overall timeout: executions stream as long as their cell
		// runs. Each call is bounded by its context, and by the
		// transport's deadlines for a server of spaced's own (an answer
		// starts within a minute; a stream, with keepalives every 5 s, is
		// never silent for one).
		http:    &http.Client{Transport: sandbox.NewPortTransport(o.Target, o.Dial, Port)},
		maxLine: o.MaxLineBytes,
	}
}

// idPattern is what the interpreter's ids look like (UUIDs), with room to
// spare; anything else is refused before it reaches a URL.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func checkID(what, id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s id %q is not valid (letters, digits, - and _, up to 128)", what, id)
	}
	return nil
}

// call is one request to sandbox id's interpreter. notFound is what a 404
// means for this call ("execution X"). On success the caller owns the
// response's body.
type call struct {
	sandboxID string
	method    string
	path      string // escaped
	body      any    // JSON, or nil
	notFound  string
	accept    string
}

func (c *Client) do(ctx context.Context, cl call) (*http.Response, error) {
	// The sandbox is looked up per request, not only at dial time: a pooled
	// connection would not notice that the sandbox stopped.
	t, err := c.target(cl.sandboxID)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, sandbox.PortURL(cl.sandboxID, Port, cl.path), body)
	if err != nil {
		return nil, fmt.Errorf("code interpreter request: %w", err)
	}
	// Never the access token itself: any process in the sandbox may be
	// the one listening on the port.
	req.Header.Set("X-Access-Token", accesstoken.Interpreter(t.AccessToken))
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.accept != "" {
		req.Header.Set("Accept", cl.accept)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, cl.sandboxID, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, statusError(cl, resp)
	}
	return resp, nil
}

// transportError classifies a failure to reach the interpreter.
func (c *Client) transportError(ctx context.Context, id string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errdefs.Class(err) != nil:
		return err // the sandbox lookup at dial time: not running
	case errors.Is(err, syscall.ECONNREFUSED):
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err,
			"sandbox %s runs no code interpreter: create it from code-interpreter-v1 (or a template that starts space-interpreter on port %d)", id, Port)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "the code interpreter of sandbox %s is not reachable", id)
}

// statusError classifies an error answer. The interpreter answers plain
// text (JSON for a 429); its words are shown where they describe the
// caller's request.
func statusError(cl call, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes+1))
	msg := strings.TrimSpace(string(b))
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes] + "..."
	}
	cause := fmt.Errorf("code interpreter: %s %s: HTTP %d: %q", cl.method, cl.path, resp.StatusCode, msg)
	id := cl.sandboxID
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return errdefs.Wrap(errdefs.ErrInvalidArgument, cause, "%s", msg)
	case http.StatusNotFound:
		if msg == "404 page not found" {
			// Go's mux: the route does not exist, so this is not a
			// space-interpreter that knows resumable executions.
			return errdefs.Wrap(errdefs.ErrFailedPrecondition, cause,
				"the code interpreter of sandbox %s has no %s %s: it is not space-interpreter, or an older one", id, cl.method, routeOf(cl.path))
		}
		return errdefs.Wrap(errdefs.ErrNotFound, cause, "%s not found in sandbox %s", cl.notFound, id)
	case http.StatusUnauthorized:
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, cause,
			"the code interpreter of sandbox %s refused the sandbox's access token: it must run as root to read the agent's state file", id)
	case http.StatusTooManyRequests:
		// A cap on the interpreter's contexts; its body is JSON.
		var e struct{ Error struct{ Message string } }
		if json.Unmarshal([]byte(msg), &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return errdefs.Wrap(errdefs.ErrResourceExhausted, cause, "the code interpreter of sandbox %s: %s", id, msg)
	case http.StatusServiceUnavailable:
		return errdefs.Wrap(errdefs.ErrUnavailable, cause, "the code interpreter of sandbox %s is not ready: %s", id, msg)
	case http.StatusInternalServerError:
		return errdefs.Wrap(errdefs.ErrUnavailable, cause, "the code interpreter of sandbox %s failed: %s", id, msg)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, cause, "the code interpreter of sandbox %s answered HTTP %d", id, resp.StatusCode)
}

// routeOf is path with its ids turned into placeholders, for messages.
func routeOf(path string) string {
	parts := strings.Split(path, "/")
	if len(parts) > 2 {
		parts[2] = "{id}"
	}
	return strings.Join(parts, "/")
}

// getJSON decodes a JSON answer into out (nil: discard it).
func (c *Client) getJSON(ctx context.Context, cl call, out any) error {
	resp, err := c.do(ctx, cl)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxAnswerBytes+1)
	if out == nil {
		_, _ = io.Copy(io.Discard, body)
		return nil
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "the code interpreter of sandbox %s broke off its answer", cl.sandboxID)
	}
	if len(b) > maxAnswerBytes {
		return errdefs.New(errdefs.ErrUnavailable, "the code interpreter of sandbox %s answered more than %d bytes", cl.sandboxID, maxAnswerBytes)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "the code interpreter of sandbox %s answered something that is not its JSON", cl.sandboxID)
	}
	return nil
}

// Execution is one resumable execution as the interpreter lists it.
type Execution struct {
	ID        string     `json:"id"`
	ContextID string     `json:"context_id"`
	State     string     `json:"state"` // running | done
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
}

// Executions lists the executions the interpreter keeps, oldest first.
func (c *Client) Executions(ctx context.Context, sandboxID string) ([]Execution, error) {
	var out []Execution
	if err := c.getJSON(ctx, call{sandboxID: sandboxID, method: http.MethodGet, path: "/executions"}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Interrupt interrupts an execution (SIGINT to its cell, or it never
// starts if it waits for its context); its stream ends soon after with
// the cell's error and end line. Interrupting a finished one does nothing.
func (c *Client) Interrupt(ctx context.Context, sandboxID, executionID string) (Execution, error) {
	if err := checkID("execution", executionID); err != nil {
		return Execution{}, err
	}
	var out Execution
	err := c.getJSON(ctx, call{
		sandboxID: sandboxID, method: http.MethodPost,
		path:     "/executions/" + url.PathEscape(executionID) + "/interrupt",
		notFound: "execution " + executionID,
	}, &out)
	return out, err
}
