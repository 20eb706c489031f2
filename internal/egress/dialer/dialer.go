// Package dialer is the one way spaced opens a connection on a tenant's
// behalf: registry pulls, the egress gateway's upstream dials, and any
// later fetch a tenant can aim (webhooks, MCP servers). It refuses the
// platform floor, the operator's additions to it, and every address of
// this node and of the cluster's other nodes, and it decides on the
// address actually dialled (net.Dialer.Control, after resolution), so a
// name that resolves, or rebinds, to one of them is refused too.
package dialer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// Config of a Dialer.
type Config struct {
	// Floor holds additions to the platform floor (the operator's
	// SPACE_EGRESS_FLOOR, the sandbox range).
	Floor []netip.Prefix
	// Allow exempts addresses from every refusal: the operator's trusted
	// private registry (SPACE_REGISTRY_ALLOW), a test's own server. It is
	// the operator's word, never a tenant's.
	Allow []netip.Prefix
	// Local is the node's own addresses (shared by the dialers of one
	// daemon); nil: this host's interfaces alone.
	Local *Local
	// Timeout bounds one connect (default 10s).
	Timeout time.Duration
	// Logger gets one line per refused connect (nil: none).
	Logger *slog.Logger
}

// Dialer dials only addresses its config allows.
type Dialer struct {
	floor policy.Floor
	allow []netip.Prefix
	local *Local
	net   net.Dialer
	log   *slog.Logger
}

// New returns a Dialer.
func New(cfg Config) *Dialer {
	d := &Dialer{floor: policy.NewFloor(cfg.Floor...), allow: cfg.Allow, local: cfg.Local, log: cfg.Logger}
	if d.local == nil {
		d.local = NewLocal(nil, nil)
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	d.net = net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Control: d.control}
	return d
}

// RefusedError is a connect the dialer refused: no packet was sent. Its
// text (the address and why) is for the log; a tenant is told no more
// than that the destination cannot be reached.
type RefusedError struct {
	Addr   netip.Addr
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("address %s refused: %s", e.Addr, e.Reason)
}

// IsRefused reports whether err is (or wraps) a refusal of the dialer:
// one that a retry cannot change.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Check says why ip may not be dialled (a *RefusedError), or nil.
func (d *Dialer) Check(ip netip.Addr) error {
	bare := ip.WithZone("").Unmap()
	for _, a := range d.allow {
		if a.Contains(bare) {
			return nil
		}
	}
	// This node first: of the two reasons it is the one an operator
	// reading the log might not expect.
	if d.local.Has(bare) {
		return &RefusedError{Addr: ip, Reason: "an address of this node or of a node of its cluster"}
	}
	if d.floor.Contains(ip) {
		return &RefusedError{Addr: ip, Reason: "in the platform floor"}
	}
	return nil
}

// control runs for every address a connect tries, after resolution and
// before the socket connects.
func (d *Dialer) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Reason: fmt.Sprintf("%s address %q is not an IP and port", network, address)}
	}
	if err := d.Check(ap.Addr()); err != nil {
		d.log.Warn("refused a connection made for a tenant", "network", network, "address", address, "err", err)
		return err
	}
	return nil
}

// DialContext connects as net.Dialer does, to allowed addresses only.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return d.net.DialContext(ctx, network, address)
}

// Apply makes t connect through d, directly: an environment's proxy would
// be dialled instead of the destination, and checked in its place.
func (d *Dialer) Apply(t *http.Transport) *http.Transport {
	t.DialContext = d.DialContext
	t.DialTLSContext = nil
	t.Proxy = nil
	return t
}

// Transport is a clone of http.DefaultTransport that connects through d.
func (d *Dialer) Transport() *http.Transport {
	return d.Apply(http.DefaultTransport.(*http.Transport).Clone())
}
