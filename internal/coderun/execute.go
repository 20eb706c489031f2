package coderun

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/errdefs"
)

// ExecuteRequest is one cell to run.
type ExecuteRequest struct {
	Code string
	// Language picks the language's default context ("" is python); it
	// cannot be given with ContextID.
	Language  string
	ContextID string
	// Env is set for this cell only.
	Env map[string]string
	// TimeoutSeconds interrupts the cell after that long; 0 is never.
	TimeoutSeconds int
}

// MaxTimeoutSeconds is the longest cell timeout (a day).
const MaxTimeoutSeconds = 86400

const (
	maxEnvEntries  = 256
	maxEnvValueLen = 32 << 10
	maxLanguageLen = 32
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks r before anything is sent: bad input changes nothing.
func (r ExecuteRequest) Validate() error {
	switch {
	case r.Code == "":
		return errdefs.New(errdefs.ErrInvalidArgument, "code is required")
	case !utf8.ValidString(r.Code):
		return errdefs.New(errdefs.ErrInvalidArgument, "code is not valid UTF-8")
	case r.ContextID != "" && r.Language != "":
		return errdefs.New(errdefs.ErrInvalidArgument, "give either context_id or language, not both (a context has its language)")
	case r.TimeoutSeconds < 0 || r.TimeoutSeconds > MaxTimeoutSeconds:
		return errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds must be between 0 and %d", MaxTimeoutSeconds)
	case len(r.Language) > maxLanguageLen:
		return errdefs.New(errdefs.ErrInvalidArgument, "language is longer than %d bytes", maxLanguageLen)
	case len(r.Env) > maxEnvEntries:
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d env vars", maxEnvEntries)
	}
	if r.ContextID != "" {
		if err := checkID("context", r.ContextID); err != nil {
			return err
		}
	}
	for k, v := range r.Env {
		if !envName.MatchString(k) {
			return errdefs.New(errdefs.ErrInvalidArgument, "env var name %q is not valid", k)
		}
		if len(v) > maxEnvValueLen || !utf8.ValidString(v) {
			return errdefs.New(errdefs.ErrInvalidArgument, "env var %s is not UTF-8 text of at most %d bytes", k, maxEnvValueLen)
		}
	}
	return nil
}

// executeBody is the body of the interpreter's POST /executions.
type executeBody struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	Timeout   int               `json:"timeout,omitempty"`
}

// Execute starts a cell and returns its stream, whose first line (already
// read, so ExecutionID is known) is the execution's. The cell runs on when
// the stream is closed or ctx ends: only Interrupt, its timeout, or its
// context's restart or deletion stop it early.
func (c *Client) Execute(ctx context.Context, sandboxID string, req ExecuteRequest) (*Stream, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	body := executeBody{Code: req.Code, ContextID: req.ContextID, EnvVars: req.Env, Timeout: req.TimeoutSeconds}
	if req.ContextID == "" {
		body.Language = req.Language
		if body.Language == "" {
			body.Language = "python"
		}
	}
	notFound := "context " + req.ContextID
	resp, err := c.do(ctx, call{
		sandboxID: sandboxID, method: http.MethodPost, path: "/executions", body: body,
		notFound: notFound, accept: "application/x-ndjson",
	})
	if err != nil {
		return nil, err
	}
	s := newStream(sandboxID, resp.Body, c.maxLine)
	first, err := s.Next()
	if err != nil {
		s.Close()
		return nil, err
	}
	if first.Type != TypeExecution || first.ExecutionID == "" || first.Seq != 1 {
		s.Close()
		return nil, errdefs.New(errdefs.ErrUnavailable, "the code interpreter of sandbox %s did not start an execution (its first line was %q)", sandboxID, first.Type)
	}
	s.id = first.ExecutionID
	s.pending = &first
	return s, nil
}

// Events follows an execution: its kept lines with seq > after, then the
// new ones until the end line. If lines were dropped, the first is a gap.
// A stream of an execution that had ended by line after has no lines.
func (c *Client) Events(ctx context.Context, sandboxID, executionID string, after uint64) (*Stream, error) {
	if err := checkID("execution", executionID); err != nil {
		return nil, err
	}
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	resp, err := c.do(ctx, call{
		sandboxID: sandboxID, method: http.MethodGet,
		path:     fmt.Sprintf("/executions/%s/events?%s", url.PathEscape(executionID), q.Encode()),
		notFound: "execution " + executionID, accept: "application/x-ndjson",
	})
	if err != nil {
		return nil, err
	}
	s := newStream(sandboxID, resp.Body, c.maxLine)
	s.id = executionID
	s.resumed = true
	return s, nil
}
