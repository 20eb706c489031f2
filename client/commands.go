package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Signals accepted by Signal.
const (
	SIGTERM = "SIGTERM"
	SIGKILL = "SIGKILL"
)

// RunCommand starts a command and returns its event stream: start (with the
// pid), stdout/stderr, then end. req.Background is ignored.
//
// If the connection breaks, Next returns an error; the command keeps running.
// Resume with CommandEvents(ctx, id, stream.PID(), stream.LastEventID()), or use
// RunCommandResumable.
func (c *Client) RunCommand(ctx context.Context, id string, req CommandRequest) (*CommandStream, error) {
	return c.RunCommandResumable(ctx, id, req, ResumeOptions{})
}

// RunCommandResumable is RunCommand whose stream reconnects by itself, sending
// Last-Event-ID, when the connection breaks after the start event.
//
// With ro.Retries its start is idempotent too: it carries a random
// Idempotency-Key, and a start whose answer is lost (the connection breaks,
// or the daemon answers 503, before the start event) is sent again with the
// same key, so the command runs once and its stream is read from its start.
func (c *Client) RunCommandResumable(ctx context.Context, id string, req CommandRequest, ro ResumeOptions) (*CommandStream, error) {
	req.Background = false
	key := ""
	if ro.Retries > 0 {
		key = newIdempotencyKey()
	}
	start := func() (io.ReadCloser, error) {
		resp, err := c.postCommand(ctx, id, req, "text/event-stream", key)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("want an event stream, got HTTP %d", resp.StatusCode)
		}
		return resp.Body, nil
	}
	s := &CommandStream{c: c, ctx: ctx, sandboxID: id, resume: ro}
	body, err := start()
	if err != nil {
		var apiErr *APIError
		if ro.Retries == 0 || (errors.As(err, &apiErr) && !IsUnavailable(err)) {
			return nil, fmt.Errorf("run command in %s: %w", id, err)
		}
		if err := s.conn.reconnect(ctx, ro, err, start); err != nil {
			return nil, fmt.Errorf("run command in %s: %w", id, err)
		}
	} else {
		s.conn.body, s.conn.sse = body, newSSEReader(body)
	}
	if key != "" {
		s.restart = start
	}
	return s, nil
}

// newIdempotencyKey is a random key for one command's start.
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// StartBackground starts a command without streaming its output; follow it
// later with CommandEvents.
func (c *Client) StartBackground(ctx context.Context, id string, req CommandRequest) (*Command, error) {
	req.Background = true
	resp, err := c.postCommand(ctx, id, req, "application/json", "")
	if err != nil {
		return nil, fmt.Errorf("start background command in %s: %w", id, err)
	}
	defer resp.Body.Close()
	var cmd Command
	if err := decodeJSON(resp, &cmd); err != nil {
		return nil, fmt.Errorf("start background command in %s: %w", id, err)
	}
	return &cmd, nil
}

// postCommand starts a command; key is its Idempotency-Key ("": none).
func (c *Client) postCommand(ctx context.Context, id string, req CommandRequest, accept, key string) (*http.Response, error) {
	u, err := c.endpoint(nil, "v1", "sandboxes", id, "commands")
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
	hreq.Header.Set("Accept", accept)
	if key != "" {
		hreq.Header.Set("Idempotency-Key", key)
	}
	return c.send(hreq)
}

// CommandEvents opens the event stream of command pid, replaying the events
// after afterID (0 for all the agent still buffers). If older output was
// dropped, the first event is EventGap.
func (c *Client) CommandEvents(ctx context.Context, id string, pid int, afterID uint64) (*CommandStream, error) {
	return c.CommandEventsResumable(ctx, id, pid, afterID, ResumeOptions{})
}

// CommandEventsResumable is CommandEvents whose stream reconnects by itself.
func (c *Client) CommandEventsResumable(ctx context.Context, id string, pid int, afterID uint64, ro ResumeOptions) (*CommandStream, error) {
	body, err := c.openEvents(ctx, id, pid, afterID)
	if err != nil {
		return nil, fmt.Errorf("events of command %d in %s: %w", pid, id, err)
	}
	s := newCommandStream(ctx, c, id, pid, afterID, body)
	s.resume = ro
	return s, nil
}

func (c *Client) openEvents(ctx context.Context, id string, pid int, afterID uint64) (io.ReadCloser, error) {
	u, err := c.endpoint(nil, "v1", "sandboxes", id, "commands", strconv.Itoa(pid), "events")
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

// ListCommands returns the running commands. One that ended is not listed,
// though CommandEvents still replays its events for ten minutes.
func (c *Client) ListCommands(ctx context.Context, id string) ([]Command, error) {
	var out struct {
		Commands []Command `json:"commands"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "sandboxes", id, "commands"); err != nil {
		return nil, fmt.Errorf("list commands in %s: %w", id, err)
	}
	return out.Commands, nil
}

type stdinRequest struct {
	Base64 string `json:"base64,omitempty"`
	EOF    bool   `json:"eof,omitempty"`
}

// SendStdin writes data to the command's stdin (which must have been kept open
// with CommandRequest.KeepStdinOpen).
func (c *Client) SendStdin(ctx context.Context, id string, pid int, data []byte) error {
	in := stdinRequest{Base64: base64.StdEncoding.EncodeToString(data)}
	if err := c.stdin(ctx, id, pid, in); err != nil {
		return fmt.Errorf("send stdin to command %d in %s: %w", pid, id, err)
	}
	return nil
}

// CloseStdin closes the command's stdin, so it reads end of file.
func (c *Client) CloseStdin(ctx context.Context, id string, pid int) error {
	if err := c.stdin(ctx, id, pid, stdinRequest{EOF: true}); err != nil {
		return fmt.Errorf("close stdin of command %d in %s: %w", pid, id, err)
	}
	return nil
}

func (c *Client) stdin(ctx context.Context, id string, pid int, in stdinRequest) error {
	return c.call(ctx, http.MethodPost, nil, in, nil, "v1", "sandboxes", id, "commands", strconv.Itoa(pid), "stdin")
}

// Signal sends SIGTERM or SIGKILL to the command.
func (c *Client) Signal(ctx context.Context, id string, pid int, signal string) error {
	in := struct {
		Signal string `json:"signal"`
	}{signal}
	if err := c.call(ctx, http.MethodPost, nil, in, nil, "v1", "sandboxes", id, "commands", strconv.Itoa(pid), "signal"); err != nil {
		return fmt.Errorf("signal command %d in %s: %w", pid, id, err)
	}
	return nil
}
