package dialer

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// localTTL is how long a lookup of the host's interface addresses is
// used: an address added to an interface is refused within it. The
// cluster's members change rarely and cost a catalog query: peersTTL.
const (
	localTTL = 2 * time.Second
	peersTTL = 10 * time.Second
)

// Peers lists the addresses of the cluster's other nodes.
type Peers func(ctx context.Context) ([]netip.Addr, error)

// Local is the set of the node's own addresses: every address of this
// host's interfaces (v4 and v6, loopback included) and those of the
// cluster's other nodes, looked up afresh when older than localTTL.
type Local struct {
	peers Peers
	log   *slog.Logger
	// ifaces lists the host's interface addresses (net.InterfaceAddrs;
	// a unit test gives its own).
	ifaces func() ([]net.Addr, error)

	mu      sync.Mutex
	ownAt   time.Time
	own     map[netip.Addr]bool
	otherAt time.Time
	other   map[netip.Addr]bool
}

// NewLocal returns the node's address set; peers is nil outside a
// cluster.
func NewLocal(peers Peers, log *slog.Logger) *Local {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Local{peers: peers, log: log, ifaces: net.InterfaceAddrs}
}

// Has reports whether ip (unmapped, without zone) is one of the node's
// addresses.
func (l *Local) Has(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.own[ip] || l.other[ip]
}

// refresh looks the addresses up again where they are older than their
// TTL. A failed lookup keeps what the last one found (an address is never
// forgotten for want of an answer) and is tried again after the TTL.
func (l *Local) refresh() {
	now := time.Now()
	if now.Sub(l.ownAt) > localTTL {
		l.ownAt = now
		if addrs, err := l.ifaces(); err != nil {
			l.log.Warn("list this host's addresses; keeping the last list", "err", err)
		} else {
			own := map[netip.Addr]bool{}
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					own[p.Addr().WithZone("").Unmap()] = true
				}
			}
			l.own = own
		}
	}
	if l.peers != nil && now.Sub(l.otherAt) > peersTTL {
		l.otherAt = now
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if addrs, err := l.peers(ctx); err != nil {
			l.log.Warn("list the cluster's nodes' addresses; keeping the last list", "err", err)
		} else {
			other := map[netip.Addr]bool{}
			for _, a := range addrs {
				other[a.WithZone("").Unmap()] = true
			}
			l.other = other
		}
	}
}
