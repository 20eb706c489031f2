package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Health checks that the daemon is alive (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		Status string `json:"status"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "healthz"); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if out.Status != "ok" {
		return fmt.Errorf("health: status %q", out.Status)
	}
	return nil
}

// Metrics returns the daemon's Prometheus metrics in text format (GET /metrics).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	u, err := c.endpoint(nil, "metrics")
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	resp, err := c.send(req)
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	return string(b), nil
}
