package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// FSEvent is a change under a watched directory.
type FSEvent struct {
	ID   uint64 `json:"-"`
	Name string `json:"name"` // relative to the watched directory
	Type string `json:"type"` // e.g. create, write, remove, rename, chmod
}

// WatchStream is a stream of file system events. Call Next until it fails;
// Close to stop.
type WatchStream struct {
	ctx  context.Context
	body io.ReadCloser
	sse  *sseReader
}

// Watch streams changes under the directory path (and below it if recursive).
func (c *Client) Watch(ctx context.Context, id, path string, recursive bool) (*WatchStream, error) {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	u, err := c.endpoint(q, "v1", "sandboxes", id, "files", "watch")
	if err != nil {
		return nil, fmt.Errorf("watch %s in %s: %w", path, id, err)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("watch %s in %s: %w", path, id, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, fmt.Errorf("watch %s in %s: %w", path, id, err)
	}
	return &WatchStream{ctx: ctx, body: resp.Body, sse: newSSEReader(resp.Body)}, nil
}

// Next returns the next fs event. It returns io.EOF when the daemon ended the
// stream, and skips heartbeats and events of other types.
func (w *WatchStream) Next() (FSEvent, error) {
	for {
		raw, err := w.sse.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return FSEvent{}, io.EOF
			}
			if cerr := w.ctx.Err(); cerr != nil {
				err = cerr
			}
			return FSEvent{}, fmt.Errorf("watch stream: %w", err)
		}
		if raw.Event != "fs" && raw.Event != "message" {
			continue
		}
		var ev FSEvent
		if err := json.Unmarshal([]byte(raw.Data), &ev); err != nil {
			return FSEvent{}, fmt.Errorf("watch stream: fs event: %w", err)
		}
		ev.ID, _ = strconv.ParseUint(raw.ID, 10, 64)
		return ev, nil
	}
}

// Close stops the stream.
func (w *WatchStream) Close() error { return w.body.Close() }
