package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// conn is the connection of an event stream that reconnects after a
// break: the body being read, guarded so that Close may come from another
// goroutine and interrupt a blocked read.
type conn struct {
	mu     sync.Mutex
	body   io.ReadCloser
	closed bool
	sse    *sseReader // read by the stream's one reader only
}

func newConn(body io.ReadCloser) conn {
	return conn{body: body, sse: newSSEReader(body)}
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *conn) closeBody() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body != nil {
		c.body.Close()
	}
}

// Close ends the stream; a blocked read returns.
func (c *conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.body != nil {
		return c.body.Close()
	}
	return nil
}

// errStreamClosed is what a reconnect finds when Close came first.
var errStreamClosed = errors.New("stream closed")

// reconnect drops the broken body and calls open until it gives a new one,
// at most ro.Retries times with backoff (ro.Backoff, doubled up to 5 s).
// An API error other than unavailable ends the retries: the stream's
// command or execution is gone, or not ours. It returns the last error.
func (c *conn) reconnect(ctx context.Context, ro ResumeOptions, cause error, open func() (io.ReadCloser, error)) error {
	wait := ro.Backoff
	if wait <= 0 {
		wait = 200 * time.Millisecond
	}
	c.closeBody()
	err := cause
	for attempt := 1; attempt <= ro.Retries; attempt++ {
		if ro.OnResume != nil {
			ro.OnResume(attempt, err)
		}
		body, oerr := open()
		if oerr == nil {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.closed {
				body.Close()
				return errStreamClosed
			}
			c.body, c.sse = body, newSSEReader(body)
			return nil
		}
		err = oerr
		var apiErr *APIError
		if errors.As(oerr, &apiErr) && !IsUnavailable(oerr) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
	return err
}
