package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
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

// connSet remembers a sandbox's open connections so that ending the
// sandbox also ends every stream still reading from it: a dead sandbox's
// netstack sends no RST, and a stream would otherwise hang for minutes.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (c *connSet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, fmt.Errorf("sandbox connection closed")
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

// Close ends every request and stream to the sandbox's agent.
func (a *AgentConn) Close() { a.conns.closeAll() }

func newAgentConn(addr netip.Addr, token string) *AgentConn {
	base := fmt.Sprintf("http://%s", netip.AddrPortFrom(addr, AgentPort))
	tok := &atomic.Pointer[string]{}
	tok.Store(&token)
	conns := &connSet{conns: map[net.Conn]struct{}{}}
	// One transport per sandbox: no overall timeout, because streams are
	// long; dials are bounded. Idle connections are kept as long as the
	// agent keeps them (an hour): a pool sandbox's first command uses the
	// connection its boot opened instead of dialling through its netstack.
	transport := &http.Transport{
		DialContext:         conns.dial,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     time.Hour,
		DisableCompression:  true,
	}
	hc := &http.Client{Transport: tokenTransport{token: tok, next: transport}}
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

// tokenTransport adds the access token to every request to the agent.
type tokenTransport struct {
	token *atomic.Pointer[string]
	next  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", *t.token.Load())
	return t.next.RoundTrip(r)
}

// waitHealthy polls the agent's /health until it answers 204. alive, when
// set, is asked now and then whether the sandbox is still there, so a
// sandbox that died while booting fails fast rather than at the timeout.
func (a *AgentConn) waitHealthy(ctx context.Context, alive func() bool) error {
	delay := time.Millisecond
	lastCheck := time.Now()
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
		// netstack); a short cap keeps the wait after the agent starts
		// listening short (with 20 ms it was ~8 ms on average).
		if delay < 4*time.Millisecond {
			delay *= 2
		}
	}
}
