package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spacesandbox/space/client/apitypes"
)

// Metrics is a sandbox's CPU, memory and disk over time (GET
// /v1/sandboxes/{id}/metrics).
type Metrics = apitypes.SandboxMetrics

// MetricSample is one sample: CPU as a percentage of all the sandbox's
// CPUs (0-100), memory and disk in bytes.
type MetricSample = apitypes.MetricSample

// MetricsOptions bound the samples returned; zero times are open ends.
type MetricsOptions struct {
	Start, End time.Time
}

// SandboxMetrics returns a sandbox's samples, oldest first.
func (c *Client) SandboxMetrics(ctx context.Context, id string, opts MetricsOptions) (*Metrics, error) {
	q := url.Values{}
	if !opts.Start.IsZero() {
		q.Set("start", opts.Start.Format(time.RFC3339Nano))
	}
	if !opts.End.IsZero() {
		q.Set("end", opts.End.Format(time.RFC3339Nano))
	}
	var m Metrics
	if err := c.call(ctx, http.MethodGet, q, nil, &m, "v1", "sandboxes", id, "metrics"); err != nil {
		return nil, fmt.Errorf("sandbox metrics: %w", err)
	}
	return &m, nil
}

// LogLine is one line of a sandbox's log; Fields["source"] is "agent"
// (the sandbox's own agent: processes started and ended, its warnings and
// errors) or "spaced" (its lifecycle).
type LogLine = apitypes.LogLine

// LogsOptions select log lines.
type LogsOptions struct {
	// Cursor: lines at or after it (or at or before it, Backward).
	Cursor time.Time
	// Backward returns the newest lines first.
	Backward bool
	// Limit caps the number of lines (0: all kept).
	Limit int
	// Level is the lowest level returned: debug, info, warn or error.
	Level string
	// Search keeps lines whose message contains it.
	Search string
}

// SandboxLogs returns a sandbox's log lines.
func (c *Client) SandboxLogs(ctx context.Context, id string, opts LogsOptions) ([]LogLine, error) {
	q := url.Values{}
	if !opts.Cursor.IsZero() {
		q.Set("cursor", opts.Cursor.Format(time.RFC3339Nano))
	}
	if opts.Backward {
		q.Set("direction", "backward")
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Level != "" {
		q.Set("level", opts.Level)
	}
	if opts.Search != "" {
		q.Set("search", opts.Search)
	}
	var out struct {
		Logs []LogLine `json:"logs"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "sandboxes", id, "logs"); err != nil {
		return nil, fmt.Errorf("sandbox logs: %w", err)
	}
	return out.Logs, nil
}
