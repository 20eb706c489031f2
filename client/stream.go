package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// CommandStream is the event stream of one command. Call Next until it returns
// io.EOF (after the end event) or another error; then, or to stop early, Close.
//
// A stream that breaks before the end event returns an error; resume it with
// CommandEvents(ctx, sandboxID, s.PID(), s.LastEventID()), or let
// RunCommandResumable do that for you.
type CommandStream struct {
	c         *Client
	ctx       context.Context
	sandboxID string
	resume    ResumeOptions
	// restart sends the start again under its idempotency key (nil: the
	// start had none), for a stream that broke before its start event.
	restart func() (io.ReadCloser, error)

	conn

	pid     int
	lastID  uint64
	started bool // an event with an id was seen, so ids are comparable
	ended   bool
	// serverErr is the message of an "error" event: the daemon lost the
	// agent's stream and is about to close ours.
	serverErr string
}

// ResumeOptions makes a stream reconnect with Last-Event-ID when its connection
// breaks. The zero value does not resume.
type ResumeOptions struct {
	Retries int           // reconnect attempts after one break (0: none)
	Backoff time.Duration // first wait between attempts, doubled each time up to 5s; 0 means 200ms
	// OnResume, if set, is called before each attempt with the error that broke the stream.
	OnResume func(attempt int, err error)
}

func newCommandStream(ctx context.Context, c *Client, sandboxID string, pid int, after uint64, body io.ReadCloser) *CommandStream {
	return &CommandStream{
		c: c, ctx: ctx, sandboxID: sandboxID, pid: pid, lastID: after,
		started: after > 0, conn: newConn(body),
	}
}

// PID is the command's pid, 0 until the start event was read (for RunCommand).
func (s *CommandStream) PID() int { return s.pid }

// LastEventID is the id of the last event returned by Next; pass it to
// CommandEvents to resume after it.
func (s *CommandStream) LastEventID() uint64 { return s.lastID }

// Next returns the next event; io.EOF once the end event has been returned.
// Heartbeats are skipped. It is not safe to call from several goroutines.
func (s *CommandStream) Next() (Event, error) {
	if s.ended {
		return Event{}, io.EOF
	}
	for {
		ev, err := s.nextRaw()
		if err == nil {
			return ev, nil
		}
		if !s.resumable(err) {
			return Event{}, err
		}
		if rerr := s.reconnect(err); rerr != nil {
			return Event{}, rerr
		}
	}
}

func (s *CommandStream) nextRaw() (Event, error) {
	for {
		raw, err := s.sse.next()
		if err != nil {
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
			return Event{}, fmt.Errorf("command %d stream: %w", s.pid, err)
		}
		ev, err := decodeEvent(raw)
		if err != nil {
			return Event{}, fmt.Errorf("command %d stream: %w", s.pid, err)
		}
		if ev.Type == "error" {
			var d struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			s.serverErr = "daemon: " + d.Message
			continue
		}
		if s.started && ev.ID != 0 && ev.ID <= s.lastID {
			continue // replayed after a resume: already returned
		}
		if ev.ID != 0 {
			s.lastID, s.started = ev.ID, true
		}
		switch ev.Type {
		case EventStart:
			if ev.PID != 0 {
				s.pid = ev.PID
			}
		case EventEnd:
			s.ended = true
		}
		ev.PID = s.pid
		return ev, nil
	}
}

func (s *CommandStream) resumable(err error) bool {
	var apiErr *APIError
	return s.resume.Retries > 0 && (s.pid != 0 || s.restart != nil) && s.ctx.Err() == nil &&
		!errors.As(err, &apiErr) && !s.isClosed()
}

// reconnect opens the events route after the last id, retrying with backoff;
// before the start event (no pid yet) it sends the start again instead.
func (s *CommandStream) reconnect(cause error) error {
	open := func() (io.ReadCloser, error) { return s.c.openEvents(s.ctx, s.sandboxID, s.pid, s.lastID) }
	if s.pid == 0 {
		open = s.restart
	}
	err := s.conn.reconnect(s.ctx, s.resume, cause, open)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStreamClosed):
		return fmt.Errorf("command %d stream: closed", s.pid)
	case s.ctx.Err() != nil:
		return fmt.Errorf("resume command %d: %w", s.pid, s.ctx.Err())
	}
	return fmt.Errorf("resume command %d after event %d: %w (stream broke: %v)", s.pid, s.lastID, err, cause)
}

// Close ends the stream. It does not stop the command (see Signal). Close may be
// called from another goroutine to interrupt a blocked Next.
func (s *CommandStream) Close() error { return s.conn.Close() }
