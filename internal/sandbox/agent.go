package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/api/envd/filesystem/filesystemconnect"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
)

// AgentPort is where space-agent listens inside every sandbox.
const AgentPort = 49983

// AgentConn is spaced's connection to one sandbox's agent: Connect clients
// for its services and a plain HTTP client for /files, all sending the
// sandbox's access token.
type AgentConn struct {
	// BaseURL is http://<sandbox address>:49983.
	BaseURL    string
	token      *atomic.Pointer[string]
	HTTP       *http.Client
	Agent      agentv1connect.AgentClient
	Process    processconnect.ProcessClient
	Filesystem filesystemconnect.FilesystemClient

	conns *connSet
}

// connSet is one sandbox instance's connections: every connection spaced
// holds to it, to its agent (AgentConn) and to its other ports (the port
// transport), native and E2B alike. An instance lives from its boot or
// restore to its end, pause or kill; a resume or fork makes a new one.
// Closing the set ends every request and stream still open to the
// instance at once: a dead or paused sandbox's netstack sends no RST, and
// a request would otherwise hang until its client gave up, or (on a
// resumed sandbox with the same address) be carried by a connection the
// restored netstack still knew into the new instance.
type connSet struct {
	// n numbers the instance, uniquely in this process: the port
	// transport keys its pool by it.
	n      uint64
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// rest is the instance's activity and idle freeze (rest.go); nil
	// while it boots, and on runtimes that cannot freeze.
	rest atomic.Pointer[rest]
}

// hold marks a request to the instance open (rest.hold), waking it first
// if it rests frozen.
func (c *connSet) hold(ctx context.Context) (release func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	r := c.rest.Load()
	if r == nil {
		return func() {}, nil
	}
	return r.hold(ctx)
}

// roundTripHeld sends r through send while holding the instance awake,
// until the answer's body is closed.
func (c *connSet) roundTripHeld(r *http.Request, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	release, err := c.hold(r.Context())
	if err != nil {
		return nil, err
	}
	resp, err := send(r)
	if err != nil {
		release()
		return nil, err
	}
	resp.Body = holdBody(resp.Body, release)
	return resp, nil
}

// instances numbers connSets.
var instances atomic.Uint64

func newConnSet() *connSet {
	return &connSet{n: instances.Add(1), conns: map[net.Conn]struct{}{}}
}

// errInstanceEnded is what a dial to an instance that ended gets.
var errInstanceEnded = errors.New("the sandbox instance has ended (stopped, paused or killed)")

// agentDialer bounds dials, and finds a peer that stopped answering while
// a connection idles within about 20 s (keepalive probes).
var agentDialer = net.Dialer{
	Timeout:         3 * time.Second,
	KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3},
}

func (c *connSet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := agentDialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return c.add(conn)
}

// add tracks conn, or closes it if the instance has ended.
func (c *connSet) add(conn net.Conn) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, errInstanceEnded
	}
	tc := &trackedConn{Conn: conn, set: c}
	c.conns[tc] = struct{}{}
	return tc, nil
}

func (c *connSet) closeAll() {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = nil
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
}

// dropIdle closes every connection of the instance, keeping it open to
// new ones: the freezer calls it when nothing is open to the sandbox, so
// all are idle in the transports' pools. A pooled connection kept across a
// freeze dies under it (the host's keepalive probes go unanswered; or the
// agent's own idle timeout fires at the thaw, as the next request is sent
// on it: one woken command in about 400 got "unexpected EOF"); the first
// request after a wake dials anew instead.
func (c *connSet) dropIdle() {
	c.mu.Lock()
	conns := c.conns
	c.conns = map[net.Conn]struct{}{}
	c.mu.Unlock()
	for conn := range conns {
		conn.Close()
	}
}

// open is the number of connections tracked now.
func (c *connSet) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.set.mu.Lock()
		delete(t.set.conns, t)
		t.set.mu.Unlock()
	})
	return t.Conn.Close()
}

// Close ends every request and stream to the sandbox instance, to its
// agent and to its other ports.
func (a *AgentConn) Close() { a.conns.closeAll() }

// Every request spaced sends to a server of its own in a sandbox (the
// agent, the code interpreter) is bounded (boundedRoundTrip): its answer
// must start within agentReplyTimeout once the request is sent, and a
// streamed answer may not go silent for longer: streams are asked for
// keepalives at least every agentKeepalive (the interpreter sends its own
// every 5 s), so only a stuck server or a dead connection is. A /health
// is answered at once by a live agent: it must be answered whole within
// agentHealthTimeout (the E2B SDKs' own health probe waits 5 s).
// Variables for tests.
var (
	agentReplyTimeout  = 60 * time.Second
	agentHealthTimeout = 5 * time.Second
)

const (
	keepaliveHeader = "Keepalive-Ping-Interval" // E2B's, in seconds
	agentKeepalive  = 10                        // seconds
)

func newAgentConn(addr netip.Addr, token string) *AgentConn {
	base := fmt.Sprintf("http://%s", netip.AddrPortFrom(addr, AgentPort))
	tok := &atomic.Pointer[string]{}
	tok.Store(&token)
	conns := newConnSet()
	// One transport per sandbox instance: no overall timeout, because
	// streams are long; dials and answers are bounded. Idle connections
	// are kept as long as the agent keeps them (an hour): a pool
	// sandbox's first command uses the connection its boot opened instead
	// of dialling through its netstack.
	transport := &http.Transport{
		DialContext:           conns.dial,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       time.Hour,
		ResponseHeaderTimeout: agentReplyTimeout,
		DisableCompression:    true,
	}
	hc := &http.Client{Transport: agentTransport{token: tok, next: transport, conns: conns}}
	opts := []connect.ClientOption{connect.WithProtoJSON()}
	return &AgentConn{
		BaseURL:    base,
		token:      tok,
		HTTP:       hc,
		Agent:      agentv1connect.NewAgentClient(hc, base, opts...),
		Process:    processconnect.NewProcessClient(hc, base, opts...),
		Filesystem: filesystemconnect.NewFilesystemClient(hc, base, opts...),
		conns:      conns,
	}
}

// setToken makes later requests send token, over the same connections:
// after boot's Init replaced the boot token, the sandbox's first command
// finds a warm connection instead of dialling through its netstack.
func (a *AgentConn) setToken(token string) { a.token.Store(&token) }

// agentTransport adds the access token to every request to the agent and
// bounds it (boundedRoundTrip).
type agentTransport struct {
	token *atomic.Pointer[string]
	next  http.RoundTripper
	conns *connSet
}

func (t agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", *t.token.Load())
	return t.conns.roundTripHeld(r, func(r *http.Request) (*http.Response, error) {
		return boundedRoundTrip(t.next, r)
	})
}

// ErrSilent is the cause of a request to a server of spaced's own in a
// sandbox that was ended because its answer did not come, or stopped
// coming, in time: the server is stuck or the connection dead.
var ErrSilent = errors.New("the sandbox stopped answering")

// boundedRoundTrip sends r, which the caller owns, through next with the
// deadlines above: next's ResponseHeaderTimeout must be
// agentReplyTimeout. It asks for keepalives at least every
// agentKeepalive, lowering what a client asked for (a keepalive more is
// harmless; a client's hour would defeat the silence bound).
func boundedRoundTrip(next http.RoundTripper, r *http.Request) (*http.Response, error) {
	parent := r.Context()
	ctx, cancel := context.WithCancelCause(parent)
	if r.URL.Path == "/health" {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, agentHealthTimeout, ErrSilent)
		outer := cancel
		cancel = func(err error) { stop(); outer(err) }
	}
	r = r.WithContext(ctx)
	if n, err := strconv.ParseFloat(r.Header.Get(keepaliveHeader), 64); err != nil || n <= 0 || n > agentKeepalive {
		r.Header.Set(keepaliveHeader, strconv.Itoa(agentKeepalive))
	}
	resp, err := next.RoundTrip(r)
	if err != nil {
		silent := errors.Is(context.Cause(ctx), ErrSilent) || (parent.Err() == nil && isTimeout(err))
		cancel(nil)
		if silent {
			return nil, fmt.Errorf("%w: %w", ErrSilent, err)
		}
		return nil, err
	}
	resp.Body = &silenceBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel}
	return resp, nil
}

// isTimeout reports a transport's own timeout: no response headers
// within ResponseHeaderTimeout, or a dial that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// silenceBody cancels its request when a Read waits longer than
// agentReplyTimeout. Time the caller spends between reads (a slow client
// downstream) does not count.
type silenceBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
}

func (b *silenceBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.timer == nil {
		b.timer = time.AfterFunc(agentReplyTimeout, func() { b.cancel(ErrSilent) })
	} else {
		b.timer.Reset(agentReplyTimeout)
	}
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.timer.Stop()
	b.mu.Unlock()
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), ErrSilent) {
		err = ErrSilent
	}
	return n, err
}

func (b *silenceBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// waitHealthy polls the agent's /health until it answers 204. alive, when
// set, is asked now and then whether the sandbox is still there, so a
// sandbox that died while booting fails fast rather than at the timeout.
func (a *AgentConn) waitHealthy(ctx context.Context, alive func() bool) error {
	delay := time.Millisecond
	start := time.Now()
	lastCheck := start
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.BaseURL+"/health", nil)
		tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := a.HTTP.Do(req.WithContext(tctx))
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if alive != nil && time.Since(lastCheck) > 250*time.Millisecond {
			lastCheck = time.Now()
			if !alive() {
				return fmt.Errorf("sandbox stopped before its agent answered (last error: %v)", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not healthy: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		// Polls are cheap (a refused connect through the sandbox's
		// netstack), and the wait after the agent starts listening is half
		// the poll interval on average (with 20 ms it was ~8 ms, with 4 ~2):
		// every millisecond while a boot's agent is due (a Go program's
		// start in gVisor, 10-15 ms), then backing off to 4 ms for a
		// sandbox that is slow to come up on a busy machine.
		if time.Since(start) > 50*time.Millisecond && delay < 4*time.Millisecond {
			delay *= 2
		}
	}
}
