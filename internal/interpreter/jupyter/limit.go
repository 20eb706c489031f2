package jupyter

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"strings"
	"sync"

	zmq "github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Frame limit. zmq4 (v0.17) allocates each frame it reads whole, at the
// size the frame's header announces, and has no option to bound that
// (libzmq's ZMQ_MAXMSGSIZE has no counterpart). A kernel runs the user's
// code, which can print hundreds of MB in one message, or write any
// frame header to the kernel's socket: held whole, one message could take
// the sandbox's memory. So a Client dialed with a limit reaches its
// kernel through the transports below, whose connections read the ZMTP
// framing (RFC 23) before zmq4 does:
//
//   - a message frame over the limit reaches zmq4 cut to the limit's
//     length; the rest is read and dropped as it arrives, never held;
//   - the message's signature is checked on the way over the whole frames
//     (it cannot be checked on what zmq4 gets), and a message that had a
//     frame cut gets one more frame at its end, a trailer saying whether
//     it matched (decode turns it into Message.Cut);
//   - zmq4 queues up to 10 messages per socket before we read them: a
//     connection waits before it passes a new message while the Client's
//     messages read but not yet handled hold the limit or more, so what
//     zmq4 holds for a Client stays under twice the limit;
//   - a command frame (the ZMTP handshake, pings) over 64 KiB ends the
//     connection.

const (
	zmtpGreeting = 64 // bytes, passed untouched
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
	maxCommand   = 64 << 10
)

// trailerMagic starts the trailer frame a limitConn adds. It is random per
// process: a kernel cannot forge a trailer, whatever it sends.
var trailerMagic = func() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}()

// trailer reports whether f is a limitConn's trailer, and its verdict.
func trailer(f []byte) (ok, signed bool) {
	if len(f) != len(trailerMagic)+1 || !hmac.Equal(f[:len(trailerMagic)], trailerMagic) {
		return false, false
	}
	return true, f[len(trailerMagic)] == 1
}

// dials are the Clients' connections, by the token their endpoints carry
// ("space-ipc://<token>@<path>"): every Client dials its kernel through
// the transports below, which bound frames when the Client has a limit
// and can cut a handshake that hangs (dialGroup.abort).
var dials sync.Map // string -> *dialGroup

// dialGroup is one Client's connections and frame limit.
type dialGroup struct {
	limit *frameLimit // nil: frames are not bounded

	mu      sync.Mutex
	conns   []net.Conn // made while dialling (until dialled)
	aborted bool
	dialled bool
}

// add keeps conn, to be closed by abort, while the Client dials; after
// abort it closes conn. Connections made once dialled (zmq4's reconnects)
// are not kept: nothing aborts them.
func (g *dialGroup) add(conn net.Conn) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted {
		conn.Close()
		return net.ErrClosed
	}
	if !g.dialled {
		g.conns = append(g.conns, conn)
	}
	return nil
}

// dial ends the dialling: abort can no longer come, so the connections
// are no longer kept.
func (g *dialGroup) dial() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dialled, g.conns = true, nil
}

// abort closes every connection made and refuses new ones: zmq4 reads a
// peer's ZMTP greeting with no deadline, so a port that accepts and never
// greets (another process took the kernel's port) would hold Dial forever.
func (g *dialGroup) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.aborted = true
	for _, c := range g.conns {
		c.Close()
	}
}

func init() {
	for scheme, network := range map[string]string{"space-ipc": "unix", "space-tcp": "tcp"} {
		if err := zmq.RegisterTransport(scheme, limitTransport{network: network}); err != nil {
			panic(err)
		}
	}
}

// frameLimit is one Client's: the largest frame zmq4 gets, the key that
// signs its kernel's messages, and the bytes of messages passed to zmq4
// that the Client has not handled yet.
type frameLimit struct {
	max int64
	key []byte

	mu     sync.Mutex
	cond   *sync.Cond
	held   int64
	closed bool
}

func newFrameLimit(max int64, key []byte) *frameLimit {
	l := &frameLimit{max: max, key: key}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// wait blocks while the messages not yet handled hold the limit or more.
func (l *frameLimit) wait() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.held >= l.max && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		return net.ErrClosed
	}
	return nil
}

func (l *frameLimit) add(n int64) {
	l.mu.Lock()
	l.held += n
	l.mu.Unlock()
}

// release is called for each message the Client handled.
func (l *frameLimit) release(n int64) {
	l.mu.Lock()
	l.held -= n
	l.mu.Unlock()
	l.cond.Broadcast()
}

func (l *frameLimit) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cond.Broadcast()
}

// groupEndpoint is endpoint (ipc:// or tcp://) through the transports
// below, for the dialGroup registered under token.
func groupEndpoint(endpoint, token string) (string, error) {
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok || scheme != "ipc" && scheme != "tcp" {
		return "", fmt.Errorf("no transport for endpoint %q", endpoint)
	}
	return "space-" + scheme + "://" + token + "@" + addr, nil
}

type limitTransport struct{ network string }

func (t limitTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	token, target, _ := strings.Cut(addr, "@")
	v, ok := dials.Load(token)
	if !ok {
		return nil, fmt.Errorf("no client registered for %q", token)
	}
	g := v.(*dialGroup)
	conn, err := d.DialContext(ctx, t.network, target)
	if err != nil {
		return nil, err
	}
	if err := g.add(conn); err != nil {
		return nil, err
	}
	if g.limit == nil {
		return conn, nil
	}
	return newLimitConn(conn, g.limit), nil
}

func (limitTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("the kernel transport only dials")
}

func (limitTransport) Addr(ep string) (string, error) { return ep, nil }

// limitConn is a connection to a kernel as zmq4 reads it (see Frame
// limit above). Writes pass untouched.
type limitConn struct {
	net.Conn
	r   *bufio.Reader
	lim *frameLimit
	mac hash.Hash // nil: messages are not signed

	greeting int    // greeting bytes still to pass
	pending  []byte // bytes for zmq4 before more are read: a header, a trailer
	inFrame  bool
	frame    frameState
	msg      msgState
	scratch  []byte
}

// frameState is the frame being read.
type frameState struct {
	command    bool
	last       bool
	pass, drop int64  // body bytes still to pass to zmq4, then to drop
	capture    []byte // the body as read, when it must be looked at
	keep       bool   // capture it
	signed     bool   // the body goes into the signature
	index      int    // within its message
	sent       int64  // body bytes zmq4 gets
}

// msgState is the message being read.
type msgState struct {
	frames int // frames so far
	delim  int // index of the <IDS|MSG> delimiter; -1 before it
	sig    []byte
	signed int // signed frames seen (4 when whole)
	cut    bool
}

func newLimitConn(conn net.Conn, lim *frameLimit) *limitConn {
	c := &limitConn{Conn: conn, r: bufio.NewReaderSize(conn, 64<<10), lim: lim, greeting: zmtpGreeting}
	if len(lim.key) > 0 {
		c.mac = hmac.New(sha256.New, lim.key)
	}
	c.resetMsg()
	return c
}

func (c *limitConn) resetMsg() {
	c.msg = msgState{delim: -1}
	if c.mac != nil {
		c.mac.Reset()
	}
}

func (c *limitConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.greeting > 0 {
		n, err := c.r.Read(p[:min(len(p), c.greeting)])
		c.greeting -= n
		return n, err
	}
	for {
		switch {
		case len(c.pending) > 0:
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		case c.inFrame && c.frame.pass > 0:
			n, err := c.r.Read(p[:min(int64(len(p)), c.frame.pass)])
			c.frame.pass -= int64(n)
			c.body(p[:n])
			return n, err
		case c.inFrame && c.frame.drop > 0:
			if c.scratch == nil {
				c.scratch = make([]byte, 32<<10)
			}
			n, err := c.r.Read(c.scratch[:min(int64(len(c.scratch)), c.frame.drop)])
			c.frame.drop -= int64(n)
			c.body(c.scratch[:n])
			if err != nil {
				return 0, err
			}
		case c.inFrame:
			c.inFrame = false
			c.frameDone()
		default:
			if err := c.nextFrame(); err != nil {
				return 0, err
			}
		}
	}
}

// body takes the frame's body bytes as they go by.
func (c *limitConn) body(b []byte) {
	if c.frame.signed {
		c.mac.Write(b)
	}
	if c.frame.keep {
		c.frame.capture = append(c.frame.capture, b...)
	}
}

// nextFrame reads a frame's header and queues the header zmq4 gets.
func (c *limitConn) nextFrame() error {
	var hdr [9]byte
	if _, err := io.ReadFull(c.r, hdr[:2]); err != nil {
		return err
	}
	flags := hdr[0]
	size := uint64(hdr[1])
	if flags&flagLong != 0 {
		if _, err := io.ReadFull(c.r, hdr[2:9]); err != nil {
			return err
		}
		size = binary.BigEndian.Uint64(hdr[1:9])
	}
	if flags&flagCommand != 0 {
		if size > maxCommand {
			return fmt.Errorf("kernel sent a ZMTP command of %d bytes (at most %d)", size, maxCommand)
		}
		c.frame = frameState{command: true, last: true, pass: int64(size), sent: int64(size)}
		c.inFrame = true
		c.pending = header(flags, size)
		return nil
	}
	if c.msg.frames == 0 {
		// A message starts: wait while the Client has the limit's worth
		// of messages still to handle.
		if err := c.lim.wait(); err != nil {
			return err
		}
	}
	f := frameState{index: c.msg.frames, last: flags&flagMore == 0}
	c.msg.frames++
	switch rel := f.index - c.msg.delim; {
	case c.msg.delim < 0:
		f.keep = size == uint64(len(delimiter))
	case rel == 1:
		f.keep = size <= 128 // hex of a SHA-256 HMAC is 64
	case rel >= 2 && rel <= 5:
		f.signed = c.mac != nil
		c.msg.signed++
	}
	if size > 1<<62 {
		return fmt.Errorf("kernel sent a frame of %d bytes", size)
	}
	sent := size
	if int64(size) > c.lim.max {
		sent = uint64(c.lim.max)
		c.msg.cut = true
	}
	f.pass, f.drop, f.sent = int64(sent), int64(size-sent), int64(sent)
	if f.last && c.msg.cut {
		flags |= flagMore // the trailer follows
	}
	c.frame, c.inFrame = f, true
	c.pending = header(flags, sent)
	c.lim.add(f.sent)
	return nil
}

// frameDone looks at a frame that has gone by, and ends its message.
func (c *limitConn) frameDone() {
	f := &c.frame
	if f.command {
		return
	}
	switch {
	case c.msg.delim < 0 && f.keep && string(f.capture) == string(delimiter):
		c.msg.delim = f.index
	case c.msg.delim >= 0 && f.index == c.msg.delim+1 && f.keep:
		c.msg.sig = f.capture
	}
	if !f.last {
		return
	}
	if c.msg.cut {
		t := append(append(header(0, uint64(len(trailerMagic)+1)), trailerMagic...), c.verdict())
		c.pending = append(c.pending, t...)
		c.lim.add(int64(len(trailerMagic) + 1))
	}
	c.resetMsg()
}

// verdict is 1 if the message's signature matched its whole frames.
func (c *limitConn) verdict() byte {
	if c.mac == nil {
		return 1 // signing is off (an empty key), as decode treats it
	}
	if c.msg.signed < 4 || c.msg.sig == nil {
		return 0
	}
	sum := c.mac.Sum(nil)
	want := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(want, sum)
	if hmac.Equal(want, c.msg.sig) {
		return 1
	}
	return 0
}

// header is a frame header (RFC 23) for flags and size: short up to 255
// bytes, long past it.
func header(flags byte, size uint64) []byte {
	if size <= 255 {
		return []byte{flags &^ flagLong, byte(size)}
	}
	h := make([]byte, 9)
	h[0] = flags | flagLong
	binary.BigEndian.PutUint64(h[1:], size)
	return h
}
