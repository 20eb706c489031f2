package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/store"
)

// nodeAddrs is the set of this node's addresses and, in cluster mode, the
// other nodes': no connection made for a tenant (a sandbox's through the
// egress gateway, a registry pull) reaches one. pg is the cluster catalog
// (nil with one node).
func nodeAddrs(pg *store.Postgres, log *slog.Logger) *dialer.Local {
	if pg == nil {
		return dialer.NewLocal(nil, log)
	}
	return dialer.NewLocal(func(ctx context.Context) ([]netip.Addr, error) {
		members, err := pg.Members(ctx)
		if err != nil {
			return nil, err
		}
		var out []netip.Addr
		for _, m := range members {
			ips, err := hostAddrs(ctx, m.Address)
			if err != nil {
				// One node whose name does not resolve now does not hide
				// the others.
				log.Warn("resolve a cluster node's address", "node", m.ID, "address", m.Address, "err", err)
				continue
			}
			out = append(out, ips...)
		}
		return out, nil
	}, log)
}

// hostAddrs resolves the host of a node's URL.
func hostAddrs(ctx context.Context, nodeURL string) ([]netip.Addr, error) {
	u, err := url.Parse(nodeURL)
	if err != nil {
		return nil, fmt.Errorf("node address %q: %w", nodeURL, err)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		return []netip.Addr{ip}, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, err
}

// registryDialer is the dialer of registry pulls: the tenant dialer with
// the operator's trusted registries allowed.
func registryDialer(cfg config.Config, local *dialer.Local, log *slog.Logger) *dialer.Dialer {
	return dialer.New(dialer.Config{
		Floor: append([]netip.Prefix{cfg.SandboxCIDR}, cfg.EgressFloor...),
		Allow: cfg.RegistryAllow, Local: local, Logger: log,
	})
}
