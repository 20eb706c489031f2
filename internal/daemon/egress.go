package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/miekg/dns"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/sandbox"
)

// egressKeys are what sandboxes need of the egress gateway before it
// starts: the secrets it injects and the CA it intercepts TLS with.
type egressKeys struct {
	dir     string
	secrets *secrets.Store
	caPEM   []byte
}

func openEgressKeys(ctx context.Context, cfg config.Config, stor *storage) (*egressKeys, error) {
	dir := filepath.Join(cfg.DataDir, "egress")
	sec, err := openSecrets(ctx, dir, stor)
	if err != nil {
		return nil, err
	}
	caPEM, err := egress.LoadCA(dir)
	if err != nil {
		return nil, err
	}
	return &egressKeys{dir: dir, secrets: sec, caPEM: caPEM}, nil
}

// sandboxConfig is the sandboxes' side of the gateway.
func (k *egressKeys) sandboxConfig() sandbox.EgressConfig {
	return sandbox.EgressConfig{
		CAPEM:        k.caPEM,
		SecretExists: func(name string) bool { _, ok := k.secrets.Get(name); return ok },
	}
}

// openSecrets opens the egress gateway's secrets: in the data dir on one
// node; in the catalog in a cluster, sealed under a keyset every node
// shares, which the catalog keeps sealed under the platform key.
func openSecrets(ctx context.Context, dir string, stor *storage) (*secrets.Store, error) {
	pg, keys := stor.cluster, stor.keys
	if pg == nil {
		return secrets.Open(dir)
	}
	const ad = "space/cluster/secrets-keyset"
	h, err := secrets.NewKeyset()
	if err != nil {
		return nil, err
	}
	plain, err := secrets.EncodeKeyset(h)
	if err != nil {
		return nil, err
	}
	fresh, err := keys.SealBytes(plain, []byte(ad))
	if err != nil {
		return nil, err
	}
	blob, err := pg.ClusterKey(ctx, "secrets", fresh)
	if err != nil {
		return nil, err
	}
	if plain, err = keys.OpenBytes(blob, []byte(ad)); err != nil {
		return nil, fmt.Errorf("open the cluster's secrets keyset (is SPACE_PLATFORM_KEY_FILE the one the other nodes use?): %w", err)
	}
	if h, err = secrets.DecodeKeyset(plain); err != nil {
		return nil, err
	}
	return secrets.OpenWith(pg.Secrets(), h)
}

// gatewayDeps are what the egress gateway asks and tells.
type gatewayDeps struct {
	keys *egressKeys
	// sandboxes answers whose a connection is; the gateway watches their
	// egress from its start.
	sandboxes *sandbox.Egress
	local     *dialer.Local
	// audit keeps the denials for the console.
	audit *console.AuditLog
	log   *slog.Logger
}

// newGateway is the egress gateway's part. Its start installs the
// firewall that steers every sandbox packet to the gateway, so it must
// start before any sandbox is re-attached; its stop closes the listeners
// (the firewall stays: sandboxes outlive spaced).
func newGateway(cfg config.Config, d gatewayDeps) part {
	var gw *egress.Gateway
	return part{
		name: "egress gateway",
		start: func(context.Context) (err error) {
			if gw, err = startGateway(cfg, d); err != nil {
				return err
			}
			d.sandboxes.OnChange(gw.Refresh)
			return nil
		},
		stop: func(context.Context) error { gw.Close(); return nil },
	}
}

func startGateway(cfg config.Config, d gatewayDeps) (*egress.Gateway, error) {
	upstream := cfg.EgressDNS
	if upstream == "" {
		rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(rc.Servers) == 0 {
			return nil, fmt.Errorf("egress: no upstream resolver (set SPACE_EGRESS_DNS): %v", err)
		}
		upstream = net.JoinHostPort(rc.Servers[0], rc.Port)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("egress: system roots: %w", err)
	}
	if cfg.EgressUpstreamCA != "" {
		data, err := os.ReadFile(cfg.EgressUpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("egress: upstream CA: %w", err)
		}
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("egress: upstream CA %s holds no PEM certificate", cfg.EgressUpstreamCA)
		}
	}
	sandboxes := d.sandboxes
	return egress.Start(egress.Config{
		CIDR: cfg.SandboxCIDR, IfPrefix: network.HostIfPrefix, Upstream: upstream, Floor: cfg.EgressFloor, Local: d.local,
		RootCAs: roots, Dir: d.keys.dir, Secrets: d.keys.secrets, EgressAddrs: sandboxes.EgressAddrs, Logger: d.log,
		Denied: func(den egress.Denial) {
			d.audit.Add(console.AuditEntry{Time: den.Time, Level: slog.LevelWarn.String(), Message: "egress denied", Attrs: map[string]string{
				"sandbox": den.Sandbox, "tenant": den.Tenant, "what": den.What, "name": den.Name, "ip": den.IP, "port": strconv.Itoa(int(den.Port)), "rule": den.Rule, "reason": den.Reason,
			}})
		},
		Lookup: func(ip netip.Addr) (egress.Sandbox, bool) {
			v, ok := sandboxes.ByAddr(ip)
			return egress.Sandbox{ID: v.ID, Tenant: v.Tenant, Policy: v.Policy, Secrets: v.Secrets}, ok
		},
	})
}
