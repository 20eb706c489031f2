package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// Download streams a file out of the sandbox. The caller closes the reader.
func (c *Client) Download(ctx context.Context, id, path string) (io.ReadCloser, error) {
	u, err := c.endpoint(pathQuery(path), "v1", "sandboxes", id, "files")
	if err != nil {
		return nil, fmt.Errorf("download %s from %s: %w", path, id, err)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s from %s: %w", path, id, err)
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, fmt.Errorf("download %s from %s: %w", path, id, err)
	}
	return resp.Body, nil
}

// Upload streams r into a file of the sandbox, creating parent directories,
// and returns the written file. r is read as the request goes out, never held
// whole in memory; it is not closed.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader) (*Entry, error) {
	u, err := c.endpoint(pathQuery(path), "v1", "sandboxes", id, "files")
	if err != nil {
		return nil, fmt.Errorf("upload %s to %s: %w", path, id, err)
	}
	// NopCloser: the transport closes request bodies, and r is the caller's.
	// It also hides the concrete type, so the length is unknown and the
	// body goes out chunked.
	req, err := c.newRequest(ctx, http.MethodPut, u, io.NopCloser(r))
	if err != nil {
		return nil, fmt.Errorf("upload %s to %s: %w", path, id, err)
	}
	if n, ok := knownLength(r); ok {
		req.ContentLength = n
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return nil, fmt.Errorf("upload %s to %s: %w", path, id, err)
	}
	defer resp.Body.Close()
	var e Entry
	if err := decodeJSON(resp, &e); err != nil {
		return nil, fmt.Errorf("upload %s to %s: %w", path, id, err)
	}
	return &e, nil
}

// knownLength returns the bytes left in readers that know it (bytes.Reader,
// strings.Reader, bytes.Buffer), so the daemon sees a Content-Length.
func knownLength(r io.Reader) (int64, bool) {
	if l, ok := r.(interface{ Len() int }); ok {
		return int64(l.Len()), true
	}
	return 0, false
}

// ListFiles lists the entries under path, depth levels down (0 means 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]Entry, error) {
	q := pathQuery(path)
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out struct {
		Entries []Entry `json:"entries"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "sandboxes", id, "files", "list"); err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", path, id, err)
	}
	return out.Entries, nil
}

// Stat describes one file or directory.
func (c *Client) Stat(ctx context.Context, id, path string) (*Entry, error) {
	var e Entry
	if err := c.call(ctx, http.MethodGet, pathQuery(path), nil, &e, "v1", "sandboxes", id, "files", "stat"); err != nil {
		return nil, fmt.Errorf("stat %s in %s: %w", path, id, err)
	}
	return &e, nil
}

// MakeDir creates a directory and its parents.
func (c *Client) MakeDir(ctx context.Context, id, path string) (*Entry, error) {
	in := struct {
		Path string `json:"path"`
	}{path}
	var e Entry
	if err := c.call(ctx, http.MethodPost, nil, in, &e, "v1", "sandboxes", id, "files", "mkdir"); err != nil {
		return nil, fmt.Errorf("mkdir %s in %s: %w", path, id, err)
	}
	return &e, nil
}

// Move renames src to dst.
func (c *Client) Move(ctx context.Context, id, src, dst string) (*Entry, error) {
	in := struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}{src, dst}
	var e Entry
	if err := c.call(ctx, http.MethodPost, nil, in, &e, "v1", "sandboxes", id, "files", "move"); err != nil {
		return nil, fmt.Errorf("move %s to %s in %s: %w", src, dst, id, err)
	}
	return &e, nil
}

// Remove deletes a file or a directory tree; a missing path is not an error.
func (c *Client) Remove(ctx context.Context, id, path string) error {
	if err := c.call(ctx, http.MethodDelete, pathQuery(path), nil, nil, "v1", "sandboxes", id, "files"); err != nil {
		return fmt.Errorf("remove %s in %s: %w", path, id, err)
	}
	return nil
}
