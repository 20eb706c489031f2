package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// CreateSandbox creates a sandbox; it returns once the sandbox can run a command.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, req, &sb, "v1", "sandboxes"); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return &sb, nil
}

// ListSandboxes returns one page of sandboxes, newest first.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (*SandboxPage, error) {
	q := url.Values{}
	if len(opts.States) > 0 {
		q.Set("state", strings.Join(opts.States, ","))
	}
	for k, v := range opts.Metadata {
		q.Add("metadata", k+"="+v)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.PageToken != "" {
		q.Set("page_token", opts.PageToken)
	}
	var page SandboxPage
	if err := c.call(ctx, http.MethodGet, q, nil, &page, "v1", "sandboxes"); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return &page, nil
}

// AllSandboxes iterates over every sandbox that matches opts, fetching pages as
// needed, starting at opts.PageToken. It stops at the first error, which it yields.
func (c *Client) AllSandboxes(ctx context.Context, opts ListOptions) iter.Seq2[Sandbox, error] {
	return func(yield func(Sandbox, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.ListSandboxes(ctx, opts)
			if err != nil {
				yield(Sandbox{}, err)
				return
			}
			for _, sb := range page.Sandboxes {
				if !yield(sb, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			// A daemon that hands back a token twice would loop us forever.
			if seen[page.NextPageToken] {
				yield(Sandbox{}, fmt.Errorf("list sandboxes: page token %q repeated", page.NextPageToken))
				return
			}
			seen[page.NextPageToken] = true
			opts.PageToken = page.NextPageToken
		}
	}
}

// ListAllSandboxes collects AllSandboxes into a slice.
func (c *Client) ListAllSandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error) {
	var all []Sandbox
	for sb, err := range c.AllSandboxes(ctx, opts) {
		if err != nil {
			return nil, err
		}
		all = append(all, sb)
	}
	return all, nil
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, http.MethodGet, nil, nil, &sb, "v1", "sandboxes", id); err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// What Sandbox.Rest says of a running sandbox: frozen at rest (no CPU;
// the next request wakes it), hibernated (checkpointed to the node's disk,
// its memory given back; the next request restores it in place) or awake.
const (
	RestFrozen     = "frozen"
	RestHibernated = "hibernated"
	RestAwake      = "awake"
)

// GetSandboxRest returns one sandbox with its Rest set (if running).
func (c *Client) GetSandboxRest(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	if err := c.call(ctx, http.MethodGet, url.Values{"rest": {"true"}}, nil, &sb, "v1", "sandboxes", id); err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// SetIdleFreeze sets how long the sandbox may go unreached before it is
// frozen at rest: 0 the node's default, -1 never.
func (c *Client) SetIdleFreeze(ctx context.Context, id string, seconds int) (*Sandbox, error) {
	in := struct {
		IdleFreezeSeconds int `json:"idle_freeze_seconds"`
	}{seconds}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, in, &sb, "v1", "sandboxes", id, "idle-freeze"); err != nil {
		return nil, fmt.Errorf("set idle freeze of sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// SetIdleDelays sets how long the sandbox may go unreached before it is
// frozen, and before it is hibernated, at rest: 0 the node's defaults,
// -1 never.
func (c *Client) SetIdleDelays(ctx context.Context, id string, freezeSeconds, hibernateSeconds int) (*Sandbox, error) {
	in := struct {
		IdleFreezeSeconds    int `json:"idle_freeze_seconds"`
		IdleHibernateSeconds int `json:"idle_hibernate_seconds"`
	}{freezeSeconds, hibernateSeconds}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, in, &sb, "v1", "sandboxes", id, "idle-freeze"); err != nil {
		return nil, fmt.Errorf("set idle delays of sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// KillSandbox kills a sandbox and removes everything it had on the host.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "sandboxes", id); err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	return nil
}

// SetNetwork replaces a running sandbox's egress policy.
func (c *Client) SetNetwork(ctx context.Context, id string, n Network) error {
	if err := c.call(ctx, http.MethodPut, nil, n, nil, "v1", "sandboxes", id, "network"); err != nil {
		return fmt.Errorf("set network of sandbox %s: %w", id, err)
	}
	return nil
}

// SetTimeout makes the sandbox expire seconds from now and returns it with its
// new ExpiresAt.
func (c *Client) SetTimeout(ctx context.Context, id string, seconds int) (*Sandbox, error) {
	in := struct {
		TimeoutSeconds int `json:"timeout_seconds"`
	}{seconds}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, in, &sb, "v1", "sandboxes", id, "timeout"); err != nil {
		return nil, fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	return &sb, nil
}
