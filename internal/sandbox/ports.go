package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reaching a port inside a sandbox over its veth, for spaced's proxies and
// clients (the E2B proxy, the native API's code interpreter client).

// DialFunc connects to an address (ip:port).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// TargetFunc looks up a running sandbox (Service.Target).
type TargetFunc func(id string) (Target, error)

// portHostSuffix makes the sandbox ID the upstream URL's host name, which
// keys the connection pool; the dialer maps it back to the sandbox's
// address.
const portHostSuffix = ".sandbox.invalid"

// DefaultDial is a plain TCP dial bounded to a few seconds.
var DefaultDial DialFunc = (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext

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
// PortURL(id, port, path) is dialled to the address target(id) gives at
// dial time. Connections are pooled per sandbox ID, not per address: a
// killed sandbox's address is soon another sandbox's, and a kept-alive
// connection to the old one must never carry a request meant for the new
// one. Dials are bounded by dial (nil: DefaultDial); nothing else is,
// because process and watch streams last long. Compression is left to the
// two ends.
func NewPortTransport(target TargetFunc, dial DialFunc) *http.Transport {
	if dial == nil {
		dial = DefaultDial
	}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			id, ok := strings.CutSuffix(host, portHostSuffix)
			if !ok {
				return nil, fmt.Errorf("sandbox port transport: unexpected upstream %q", addr)
			}
			t, err := target(id)
			if err != nil {
				return nil, err
			}
			return dial(ctx, network, net.JoinHostPort(t.IP.String(), port))
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}
