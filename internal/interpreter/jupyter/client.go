package jupyter

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	zmq "github.com/go-zeromq/zmq4"
)

// Channels a message arrives on.
const (
	Shell   = "shell"
	Control = "control"
	IOPub   = "iopub"
)

// ErrClosed is what a Route returns once its client is closed and it has
// nothing left to give.
var ErrClosed = errors.New("kernel connection closed")

// Client is the connection to one kernel: DEALER sockets on shell and
// control, a SUB on iopub, and one reader goroutine per socket that hands
// each message to the Route of the request it answers (its parent
// msg_id). Readers never block on a Route: libzmq drops iopub messages
// silently once the kernel's send queue is full, so iopub must be drained
// as fast as it comes.
type Client struct {
	sig     signer
	limit   *frameLimit // nil: frames are not bounded
	token   string      // its dialGroup's key in dials
	session string
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	socks   map[string]zmq.Socket
	sendMu  map[string]*sync.Mutex

	mu     sync.Mutex
	routes map[string]*Route
	err    error // why the client closed; nil while open
	done   chan struct{}
	wg     sync.WaitGroup
}

// Dial connects to the kernel of info. The kernel must already listen
// (ZeroMQ's dial fails otherwise); see ConnInfo.Listening. With maxFrame >
// 0 no frame the kernel sends is held past maxFrame bytes (see Frame limit
// in limit.go): a message over it arrives with Message.Cut. When dialCtx
// ends before the connections are made, Dial gives up with its error
// (once made, they no longer depend on it).
func Dial(dialCtx context.Context, info ConnInfo, maxFrame int64, logger *slog.Logger) (*Client, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		sig: signer{key: []byte(info.Key)}, session: NewID(), log: logger,
		ctx: ctx, cancel: cancel,
		socks:  map[string]zmq.Socket{},
		sendMu: map[string]*sync.Mutex{Shell: {}, Control: {}},
		routes: map[string]*Route{},
		done:   make(chan struct{}),
	}
	common := []zmq.Option{
		zmq.WithLogger(log.New(slogWriter{logger}, "", 0)),
		// The kernel listens already; a retry only covers a slow accept.
		zmq.WithDialerRetry(20 * time.Millisecond), zmq.WithDialerMaxRetries(50),
	}
	// Shell and control carry our session as their identity, as
	// jupyter_client's do.
	dealer := append([]zmq.Option{zmq.WithID(zmq.SocketIdentity(c.session))}, common...)
	c.socks[Shell] = zmq.NewDealer(ctx, dealer...)
	c.socks[Control] = zmq.NewDealer(ctx, dealer...)
	c.socks[IOPub] = zmq.NewSub(ctx, common...)
	g := &dialGroup{}
	if maxFrame > 0 {
		c.limit = newFrameLimit(maxFrame, []byte(info.Key))
		g.limit = c.limit
	}
	c.token = NewID()
	dials.Store(c.token, g)
	stop := context.AfterFunc(dialCtx, g.abort)
	defer stop()
	ports := map[string]int{Shell: info.ShellPort, Control: info.ControlPort, IOPub: info.IOPubPort}
	for name, s := range c.socks {
		ep, err := groupEndpoint(info.Endpoint(ports[name]), c.token)
		if err != nil {
			c.Close(err)
			return nil, err
		}
		if err := s.Dial(ep); err != nil {
			if cause := context.Cause(dialCtx); cause != nil {
				err = cause
			}
			c.Close(err)
			return nil, fmt.Errorf("dial %s: %w", name, err)
		}
	}
	if !stop() { // dialCtx ended as the dials did: abort closed them
		err := context.Cause(dialCtx)
		c.Close(err)
		return nil, fmt.Errorf("dial: %w", err)
	}
	g.dial()
	// Subscribing after Dial: zmq4 sends the subscription on connections
	// it already has (and re-sends stored topics on reconnect).
	if err := c.socks[IOPub].SetOption(zmq.OptionSubscribe, ""); err != nil {
		c.Close(err)
		return nil, fmt.Errorf("subscribe to iopub: %w", err)
	}
	for name, s := range c.socks {
		c.wg.Add(1)
		go c.read(name, s)
	}
	return c, nil
}

// Done is closed when the client is closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the sockets; every Route then ends with ErrClosed (or
// cause). Safe to call more than once.
func (c *Client) Close(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if cause == nil {
		cause = ErrClosed
	}
	c.err = cause
	close(c.done)
	routes := c.routes
	c.routes = map[string]*Route{}
	c.mu.Unlock()
	c.cancel()
	if c.limit != nil {
		c.limit.close() // before the sockets: their readers may wait on it
	}
	dials.Delete(c.token)
	for _, s := range c.socks {
		_ = s.Close()
	}
	for _, r := range routes {
		r.q.wake()
	}
	c.wg.Wait()
}

func (c *Client) read(name string, s zmq.Socket) {
	defer c.wg.Done()
	for {
		raw, err := s.Recv()
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Warn("kernel socket failed", "channel", name, "err", err)
				go c.Close(fmt.Errorf("%s channel: %w", name, err))
			}
			return
		}
		c.handle(name, raw)
	}
}

// handle routes one message read from a socket; then the frame limit's
// count of messages to handle goes down by its size.
func (c *Client) handle(name string, raw zmq.Msg) {
	if c.limit != nil && raw.Type != zmq.CmdMsg {
		var n int64
		for _, f := range raw.Frames {
			n += int64(len(f))
		}
		defer c.limit.release(n)
	}
	m, err := c.sig.decode(raw.Frames)
	if err != nil {
		c.log.Warn("dropped a kernel message", "channel", name, "err", err)
		return
	}
	m.Channel = name
	c.mu.Lock()
	r := c.routes[m.Parent()]
	c.mu.Unlock()
	if r != nil {
		r.deliver(m)
	}
}

// Request sends a request of msgType on channel (Shell or Control) and
// returns the Route that receives every message answering it, on any
// channel, through filter if it is not nil. The caller closes the Route.
func (c *Client) Request(channel, msgType string, content any, filter Filter) (*Route, error) {
	id, frames, err := c.sig.encode(c.session, msgType, content)
	if err != nil {
		return nil, err
	}
	r := &Route{c: c, id: id, filter: filter}
	r.q.signal = make(chan struct{}, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	// Registered before the send, so no answer can come first.
	c.routes[id] = r
	c.mu.Unlock()
	mu, ok := c.sendMu[channel]
	if !ok {
		r.Close()
		return nil, fmt.Errorf("cannot send on channel %q", channel)
	}
	mu.Lock()
	err = c.socks[channel].SendMulti(zmq.NewMsgFrom(frames...))
	mu.Unlock()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("send %s: %w", msgType, err)
	}
	return r, nil
}

// FenceType is the type of the message Fence delivers.
const FenceType = "space_fence"

// Fence sends a kernel_info_request, which the kernel answers on IOPub too
// (its busy status), and delivers a message of type FenceType to r when
// that status arrives. IOPub is one ordered stream: by then everything
// the kernel published for r before has reached r, unless ZeroMQ dropped
// it. The caller closes the returned Route.
func (c *Client) Fence(r *Route) (*Route, error) {
	var once sync.Once
	return c.Request(Shell, "kernel_info_request", struct{}{}, func(m *Message, _ func(*Message)) {
		if m.Channel == IOPub {
			once.Do(func() {
				r.q.push(&Message{Header: Header{MsgType: FenceType}, ParentHeader: Header{MsgID: r.id}, Channel: IOPub})
			})
		}
	})
}

// WaitReady returns once the kernel answers on shell and its iopub
// messages reach us. A SUB socket misses what is published before its
// subscription lands (ZeroMQ's slow joiner), so kernel_info_request is
// repeated until one is answered on both channels, as jupyter_client's
// wait_for_ready does.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		r, err := c.Request(Shell, "kernel_info_request", struct{}{}, nil)
		if err != nil {
			return err
		}
		var reply, iopub bool
		deadline := time.Now().Add(250 * time.Millisecond)
		for !(reply && iopub) {
			d := time.Until(deadline)
			if d <= 0 {
				break
			}
			m, err := r.Recv(ctx, d)
			if err != nil {
				r.Close()
				return err
			}
			if m == nil {
				break
			}
			reply = reply || m.Type() == "kernel_info_reply"
			iopub = iopub || m.Channel == IOPub
		}
		r.Close()
		if reply && iopub {
			return nil
		}
	}
}

// slogWriter carries zmq4's log lines (it takes a *log.Logger) to slog.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Debug("zmq4: " + strings.TrimSpace(string(p)))
	return len(p), nil
}
