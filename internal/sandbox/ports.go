package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Reaching a port inside a sandbox over its veth, for spaced's proxies and
// clients (the E2B proxy, the native API's code interpreter client).

// DialFunc connects to an address (ip:port).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// TargetFunc looks up a running sandbox (Targets.Target).
type TargetFunc func(id string) (Target, error)

// portHostSuffix makes the sandbox ID the upstream URL's host name; the
// transport maps it to the sandbox's address.
const portHostSuffix = ".sandbox.invalid"

// DefaultDial is a plain TCP dial bounded to a few seconds.
var DefaultDial DialFunc = agentDialer.DialContext

// PortHost is the host:port to put in a URL sent through a
// NewPortTransport transport to reach port of sandbox id.
func PortHost(id string, port int) string {
	return net.JoinHostPort(id+portHostSuffix, strconv.Itoa(port))
}

// PortURL is the URL of path on port of sandbox id, for a NewPortTransport
// transport. path starts with "/".
func PortURL(id string, port int, path string) string {
	return "http://" + PortHost(id, port) + path
}

// NewPortTransport reaches sandboxes over their veth pairs: a request for
// PortURL(id, port, path) goes to the instance of sandbox id that is
// running when it is sent, at the address target(id) gives. Connections
// belong to that instance's tracked set (the one its AgentConn has), so
// they are closed with it when it ends, pauses or is killed, and they are
// pooled per instance: a kept-alive connection never carries a request to
// another sandbox that got the address, nor to the same sandbox resumed or
// restarted. Dials go through dial (nil: DefaultDial); a Target with no
// connection set (a test's) is dialled untracked.
//
// Requests to the agent's port and to own (the ports of other servers of
// spaced's own, such as the code interpreter's, whose streams all send
// keepalives) have the deadlines of every request spaced makes to an
// agent (boundedRoundTrip), so a stuck server cannot hold a call until its
// client gives up. Requests to any other port (a user's service, which may
// take its time and owes us no keepalives) are bounded only by the
// caller's context and the instance's life. Compression is left to the two
// ends.
func NewPortTransport(target TargetFunc, dial DialFunc, own ...int) http.RoundTripper {
	if dial == nil {
		dial = DefaultDial
	}
	p := &portTransport{target: target, own: map[string]bool{strconv.Itoa(AgentPort): true}}
	for _, port := range own {
		p.own[strconv.Itoa(port)] = true
	}
	transport := func(headerTimeout time.Duration) *http.Transport {
		return &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return p.dial(ctx, dial, network, addr)
			},
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: headerTimeout,
			DisableCompression:    true,
		}
	}
	p.bounded, p.open = transport(agentReplyTimeout), transport(0)
	return p
}

type portTransport struct {
	target TargetFunc
	own    map[string]bool // ports (decimal) whose requests are bounded
	// bounded carries the requests to own ports, open all others.
	bounded, open *http.Transport
}

// RoundTrip sends r to the sandbox's current instance: the URL's host
// becomes <id>.<instance>.sandbox.invalid, which keys the pool.
func (p *portTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	host, port, err := net.SplitHostPort(r.URL.Host)
	id, ok := strings.CutSuffix(host, portHostSuffix)
	if err != nil || !ok || strings.Contains(id, ".") {
		return nil, fmt.Errorf("sandbox port transport: unexpected upstream %q", r.URL.Host)
	}
	t, err := p.target(id)
	if err != nil {
		return nil, err
	}
	out := r.Clone(r.Context())
	if out.Host == "" {
		out.Host = r.URL.Host
	}
	out.URL.Host = net.JoinHostPort(id+"."+strconv.FormatUint(t.instance(), 10)+portHostSuffix, port)
	resp, err := t.conns.roundTripHeld(out, func(out *http.Request) (*http.Response, error) {
		if p.own[port] {
			return boundedRoundTrip(p.bounded, out)
		}
		return p.open.RoundTrip(out)
	})
	if resp != nil {
		resp.Request = r
	}
	return resp, err
}

func (p *portTransport) dial(ctx context.Context, dial DialFunc, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	rest, ok := strings.CutSuffix(host, portHostSuffix)
	id, n, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return nil, fmt.Errorf("sandbox port transport: unexpected upstream %q", addr)
	}
	t, err := p.target(id)
	if err != nil {
		return nil, err
	}
	if strconv.FormatUint(t.instance(), 10) != n {
		// The instance the request was meant for ended while it waited.
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, errInstanceEnded, "sandbox %s was restarted while a request to it was being sent", id)
	}
	conn, err := dial(ctx, network, net.JoinHostPort(t.IP.String(), port))
	if err != nil || t.conns == nil {
		return conn, err
	}
	return t.conns.add(conn)
}
