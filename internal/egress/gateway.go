// Package egress is the sandboxes' only way out: a gateway inside spaced
// that every TCP connection and DNS question from a sandbox is steered to
// by the daemon's nftables table. It tells sandboxes apart by source
// address, decides on the sandbox's policy (package policy) and the
// platform floor, dials allowed destinations itself, and logs every
// refusal.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/policy"
	"github.com/spacesandbox/space/internal/egress/secrets"
)

// Sandbox is what the gateway needs to know of the sandbox behind a source
// address.
type Sandbox struct {
	ID string
	// Tenant owns it (audit lines name it).
	Tenant string
	// Policy is its egress policy (the zero Policy denies all).
	Policy policy.Policy
	// Secrets maps the sandbox's placeholders to secret names.
	Secrets map[string]string
}

func (s Sandbox) secretNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range s.Secrets {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Lookup finds the running sandbox whose address is ip.
type Lookup func(ip netip.Addr) (Sandbox, bool)

// Config of a gateway.
type Config struct {
	// CIDR is the daemon's sandbox range: it keys the firewall table and
	// is part of the floor.
	CIDR netip.Prefix
	// IfPrefix starts every sandbox's host-side veth name.
	IfPrefix string
	// Upstream is the resolver ("host:port") the gateway asks, for the
	// sandboxes and for itself.
	Upstream string
	// Floor holds the operator's additions to the platform floor.
	Floor []netip.Prefix
	// Local is the node's own addresses (and its cluster's), which no
	// sandbox reaches; nil: this host's interfaces.
	Local *dialer.Local
	// RootCAs verify upstream servers when the gateway re-originates TLS
	// (nil: the host's roots).
	RootCAs *x509.CertPool
	// Dir holds the interception CA (ca.pem, ca.key 0600).
	Dir string
	// Secrets are injected into requests of sandboxes that hold their
	// placeholders (nil: no injection).
	Secrets *secrets.Store
	Lookup  Lookup
	// EgressAddrs lists the sandboxes whose policy allows any egress; the
	// firewall drops every other sandbox's TCP (see Refresh).
	EgressAddrs func() []netip.Addr
	// Logger receives the gateway's log lines (nil: discarded).
	Logger *slog.Logger
	// Denied, if set, is told of every refusal as it happens (the
	// console's audit list), after it is logged. It must not block.
	Denied func(Denial)
}

// Denial is one refused attempt of a sandbox: what it tried (dns, tcp,
// http), where, and the rule and reason that refused it. It never holds a
// secret.
type Denial struct {
	Time    time.Time
	Sandbox string
	Tenant  string
	What    string
	Name    string
	IP      string
	Port    uint16
	Rule    string
	Reason  string
}

// Gateway is one daemon's egress gateway.
type Gateway struct {
	cfg Config
	log *slog.Logger
	// dialer refuses the floor and the node's own addresses, checked
	// before a connection is sniffed and again on the address dialled.
	dialer   *dialer.Dialer
	tcp      net.Listener
	dnsUDP   *dns.Server
	dnsTCP   *dns.Server
	resolver *resolver
	ca       *authority
	conns    connCount
	wg       sync.WaitGroup
	table    string // the daemon's nftables table (TableName)
	setMu    sync.Mutex
	inSet    map[netip.Addr]bool // the kernel's egress set; nil: unknown, so replaced whole
	ctx      context.Context
	cancel   context.CancelFunc
}

// Start listens, installs the daemon's firewall table pointing at the
// listeners, and serves until Close.
func Start(cfg Config) (*Gateway, error) {
	if !cfg.CIDR.IsValid() || cfg.Lookup == nil || cfg.EgressAddrs == nil || cfg.Upstream == "" || cfg.IfPrefix == "" || cfg.Dir == "" {
		return nil, errors.New("egress gateway: CIDR, IfPrefix, Upstream, Dir, Lookup and EgressAddrs are required")
	}
	ca, err := loadCA(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{
		ca:    ca,
		cfg:   cfg,
		log:   cfg.Logger,
		table: TableName(cfg.CIDR),
		dialer: dialer.New(dialer.Config{
			Floor: append([]netip.Prefix{cfg.CIDR}, cfg.Floor...), Local: cfg.Local, Timeout: dialTimeout, Logger: cfg.Logger,
		}),
		resolver: &resolver{upstream: cfg.Upstream},
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	// The listeners take any local address: the redirect rewrites the
	// destination to the address of the veth the packet came in on.
	if g.tcp, err = net.Listen("tcp4", "0.0.0.0:0"); err != nil {
		return nil, fmt.Errorf("egress listen: %w", err)
	}
	pc, dnsTCP, err := listenDNS()
	if err != nil {
		g.tcp.Close()
		return nil, err
	}
	dnsPort := pc.LocalAddr().(*net.UDPAddr).Port
	handler := dns.HandlerFunc(g.serveDNS)
	g.dnsUDP = &dns.Server{PacketConn: pc, Handler: handler}
	g.dnsTCP = &dns.Server{Listener: dnsTCP, Handler: handler}
	tcpPort := g.tcp.Addr().(*net.TCPAddr).Port
	if err := installRules(ruleset(g.table, cfg.IfPrefix, cfg.CIDR, tcpPort, dnsPort)); err != nil {
		g.tcp.Close()
		pc.Close()
		dnsTCP.Close()
		return nil, err
	}
	for _, srv := range []*dns.Server{g.dnsUDP, g.dnsTCP} {
		g.wg.Go(func() {
			if err := srv.ActivateAndServe(); err != nil {
				g.log.Error("egress dns server", "err", err)
			}
		})
	}
	g.wg.Go(g.acceptLoop)
	g.log.Info("egress gateway listening", "tcp_port", tcpPort, "dns_port", dnsPort, "upstream", cfg.Upstream, "table", g.table)
	return g, nil
}

// listenDNS binds the DNS server's UDP and TCP listeners to one port: a
// free UDP port, then TCP on the same number, which another socket may
// hold (an outgoing connection's ephemeral port); then it tries another.
func listenDNS() (net.PacketConn, net.Listener, error) {
	var last error
	for range 20 {
		pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return nil, nil, fmt.Errorf("egress dns listen: %w", err)
		}
		ln, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", pc.LocalAddr().(*net.UDPAddr).Port))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		last = err
	}
	return nil, nil, fmt.Errorf("egress dns listen: no port free for both UDP and TCP: %w", last)
}

// Refresh makes the firewall's egress set the sandboxes that may reach
// anything now. The gateway decides every connection anyway; the set only
// keeps sandboxes with no egress away from the gateway altogether.
func (g *Gateway) Refresh() {
	g.setMu.Lock()
	defer g.setMu.Unlock()
	want := map[netip.Addr]bool{}
	for _, a := range g.cfg.EgressAddrs() {
		want[a.Unmap()] = true
	}
	add, del := setDiff(g.inSet, want)
	// Most changes (a sandbox with no egress created or ended) leave the
	// set as it is: then there is nothing to write on the create's path.
	if g.inSet != nil && len(add)+len(del) == 0 {
		return
	}
	err := writeEgressSet(g.table, g.inSet == nil, add, del)
	if err != nil && g.inSet != nil {
		// A failed batch changes nothing, but the kernel's set may not be
		// what we think (a delete of an element it lacks fails the batch):
		// replace it whole.
		g.log.Warn("egress: update the egress set; replacing it whole", "err", err)
		add, _ = setDiff(nil, want)
		err = writeEgressSet(g.table, true, add, nil)
	}
	if err != nil {
		g.log.Error("egress: refresh the egress set", "err", err)
		g.inSet = nil
		return
	}
	g.inSet = want
}

// CAPEM is the interception CA's certificate, for sandboxes to trust.
func (g *Gateway) CAPEM() []byte { return g.ca.pem }

// Close stops the listeners and cuts open connections. The firewall table
// stays: sandboxes outlive spaced, and must stay filtered while it is away.
func (g *Gateway) Close() {
	g.cancel()
	g.tcp.Close()
	g.dnsUDP.Shutdown()
	g.dnsTCP.Shutdown()
	g.wg.Wait()
}

func (g *Gateway) acceptLoop() {
	for {
		c, err := g.tcp.Accept()
		if err != nil {
			if g.ctx.Err() == nil {
				g.log.Error("egress accept", "err", err)
			}
			return
		}
		g.wg.Go(func() { g.handle(c.(*net.TCPConn)) })
	}
}

// sandboxFor identifies the sandbox behind a connection's source address.
func (g *Gateway) sandboxFor(addr net.Addr) (Sandbox, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return Sandbox{}, false
	}
	return g.cfg.Lookup(ap.Addr().Unmap())
}

// inFloor: the platform floor, plus every address of this node and its
// cluster (package dialer: the same check as every other connection made
// for a tenant).
func (g *Gateway) inFloor(ip netip.Addr) bool {
	return g.dialer.Check(ip) != nil
}

// audit logs a refusal with what it was and why, never a secret, and
// tells cfg.Denied.
func (g *Gateway) audit(sb Sandbox, what string, d policy.Dest, rule, reason string) {
	g.log.Warn("egress denied", "sandbox", sb.ID, "tenant", sb.Tenant, "what", what, "name", d.Name, "ip", addrString(d.IP), "port", d.Port, "rule", rule, "reason", reason)
	if g.cfg.Denied != nil {
		g.cfg.Denied(Denial{Time: time.Now(), Sandbox: sb.ID, Tenant: sb.Tenant, What: what, Name: d.Name, IP: addrString(d.IP), Port: d.Port, Rule: rule, Reason: reason})
	}
}

func addrString(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	return ip.String()
}
