package coderun

import (
	"context"
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Context is one of the interpreter's contexts: a kernel with its own
// variables, language and working directory.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// ContextRequest is a new context; "" takes the interpreter's default
// (python, the kernel user's home).
type ContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

const maxCwdLen = 4096

// Validate checks r before anything is sent.
func (r ContextRequest) Validate() error {
	switch {
	case len(r.Language) > maxLanguageLen:
		return errdefs.New(errdefs.ErrInvalidArgument, "language is longer than %d bytes", maxLanguageLen)
	case len(r.Cwd) > maxCwdLen || !utf8.ValidString(r.Cwd):
		return errdefs.New(errdefs.ErrInvalidArgument, "cwd is not a path of at most %d bytes", maxCwdLen)
	}
	return nil
}

// Contexts lists the interpreter's contexts (the default ones too).
func (c *Client) Contexts(ctx context.Context, sandboxID string) ([]Context, error) {
	var out []Context
	if err := c.getJSON(ctx, call{sandboxID: sandboxID, method: http.MethodGet, path: "/contexts"}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateContext starts a context's kernel and returns the context once the
// kernel is up.
func (c *Client) CreateContext(ctx context.Context, sandboxID string, req ContextRequest) (Context, error) {
	if err := req.Validate(); err != nil {
		return Context{}, err
	}
	var out Context
	if err := c.getJSON(ctx, call{sandboxID: sandboxID, method: http.MethodPost, path: "/contexts", body: req}, &out); err != nil {
		return Context{}, err
	}
	return out, nil
}

// DeleteContext stops a context's kernel and forgets it; a cell running
// there ends.
func (c *Client) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	return c.contextCall(ctx, sandboxID, contextID, http.MethodDelete, "")
}

// RestartContext gives a context a new kernel (same id and directory): its
// variables are gone, and a cell running there ends.
func (c *Client) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	return c.contextCall(ctx, sandboxID, contextID, http.MethodPost, "/restart")
}

func (c *Client) contextCall(ctx context.Context, sandboxID, contextID, method, suffix string) error {
	if err := checkID("context", contextID); err != nil {
		return err
	}
	return c.getJSON(ctx, call{
		sandboxID: sandboxID, method: method, path: "/contexts/" + url.PathEscape(contextID) + suffix,
		notFound: "context " + contextID,
	}, nil)
}
