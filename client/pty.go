package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"
)

// PTYOptions are the terminal's initial size and user. Zero values take the
// daemon's defaults (80x24, user "user").
type PTYOptions struct {
	Cols, Rows int
	User       string
}

// PTY is an interactive terminal session in a sandbox. Read its output until
// io.EOF, Write keystrokes, Resize on window changes, then Wait for the exit
// code. Read, Write and Resize may be called from different goroutines.
type PTY struct {
	conn *websocket.Conn
	ctx  context.Context
	out  *io.PipeReader

	done     chan struct{} // closed when the server's frames end
	exitCode int
	exitErr  error
	once     sync.Once
}

// OpenPTY opens a terminal over WebSocket. ctx bounds the whole session:
// cancelling it closes the connection.
func (c *Client) OpenPTY(ctx context.Context, id string, opts PTYOptions) (*PTY, error) {
	q := url.Values{}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(opts.Cols))
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(opts.Rows))
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	u, err := c.endpoint(q, "v1", "sandboxes", id, "pty")
	if err != nil {
		return nil, fmt.Errorf("open pty in %s: %w", id, err)
	}
	h := http.Header{}
	c.authorize(h)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			err = decodeError(resp)
		}
		return nil, fmt.Errorf("open pty in %s: %w", id, err)
	}
	conn.SetReadLimit(4 << 20)
	pr, pw := io.Pipe()
	p := &PTY{conn: conn, ctx: ctx, out: pr, done: make(chan struct{}), exitCode: -1}
	go p.readLoop(pw)
	return p, nil
}

// readLoop moves binary frames to the output pipe and watches text frames for
// the exit message.
func (p *PTY) readLoop(pw *io.PipeWriter) {
	defer close(p.done)
	gotExit := false
	for {
		typ, data, err := p.conn.Read(p.ctx)
		if err != nil {
			status := websocket.CloseStatus(err)
			switch {
			case gotExit || status == websocket.StatusNormalClosure:
				if !gotExit {
					p.exitErr = errors.New("pty closed without an exit status")
				}
				pw.Close()
			default:
				p.exitErr = fmt.Errorf("pty: %w", err)
				pw.CloseWithError(p.exitErr)
			}
			return
		}
		if typ == websocket.MessageBinary {
			if _, err := pw.Write(data); err != nil {
				return // the reader side was closed by Close
			}
			continue
		}
		var msg struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		}
		if json.Unmarshal(data, &msg) == nil && msg.Type == "exit" {
			p.exitCode, gotExit = msg.ExitCode, true
		}
	}
}

// Read reads terminal output; io.EOF once the session ended.
func (p *PTY) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends keystrokes (terminal input) as a binary frame.
func (p *PTY) Write(b []byte) (int, error) {
	if err := p.conn.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, fmt.Errorf("pty write: %w", err)
	}
	return len(b), nil
}

// Resize tells the terminal its new size.
func (p *PTY) Resize(cols, rows int) error {
	b, _ := json.Marshal(struct {
		Type string `json:"type"`
		Cols int    `json:"cols"`
		Rows int    `json:"rows"`
	}{"resize", cols, rows})
	if err := p.conn.Write(p.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("pty resize: %w", err)
	}
	return nil
}

// Wait blocks until the session ends and returns the remote exit code. Output
// must be drained with Read meanwhile (as with os/exec pipes), or Wait blocks.
func (p *PTY) Wait() (int, error) {
	select {
	case <-p.done:
	case <-p.ctx.Done():
		<-p.done
	}
	return p.exitCode, p.exitErr
}

// Close ends the session.
func (p *PTY) Close() error {
	var err error
	p.once.Do(func() {
		p.out.Close()
		err = p.conn.Close(websocket.StatusNormalClosure, "")
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
