package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// dnsTTL caps the TTL handed to sandboxes. The gateway resolves names
// again for every connection, so a short TTL costs nothing in safety.
const dnsTTL = 30

// serveDNS answers a sandbox's question: only for names its policy lets
// it reach, only A and AAAA (other types get an empty answer), and never
// with an address in the floor.
func (g *Gateway) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	defer w.WriteMsg(m)
	sb, ok := g.sandboxFor(w.RemoteAddr())
	if !ok || len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeRefused
		return
	}
	q := req.Question[0]
	name, err := policy.NormalizeName(q.Name)
	if err != nil {
		g.audit(sb, "dns", policy.Dest{Name: q.Name}, "", "bad name: "+err.Error())
		m.Rcode = dns.RcodeRefused
		return
	}
	if v := sb.Policy.Resolvable(name); !v.Allowed {
		g.audit(sb, "dns", policy.Dest{Name: name}, v.Rule, "name not allowed")
		m.Rcode = dns.RcodeRefused
		return
	}
	if q.Qclass != dns.ClassINET || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := g.resolver.lookup(ctx, name, q.Qtype)
	if err != nil {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	for _, ip := range ips {
		if g.inFloor(ip) {
			g.audit(sb, "dns", policy.Dest{Name: name, IP: ip}, "floor", "answer in the floor dropped")
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: dnsTTL}
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(ip.AsSlice())})
		} else {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(ip.AsSlice())})
		}
	}
}

// resolver asks the upstream resolver for a name's addresses. CNAME
// chains are followed by the upstream (a recursive resolver); only the
// addresses are kept.
type resolver struct {
	upstream string
}

func (r *resolver) lookup(ctx context.Context, name string, qtype uint16) ([]netip.Addr, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	c := &dns.Client{Timeout: 3 * time.Second}
	in, _, err := c.ExchangeContext(ctx, m, r.upstream)
	if err == nil && in.Truncated {
		c.Net = "tcp"
		in, _, err = c.ExchangeContext(ctx, m, r.upstream)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	if in.Rcode != dns.RcodeSuccess && in.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("resolve %s: %s", name, dns.RcodeToString[in.Rcode])
	}
	var out []netip.Addr
	for _, rr := range in.Answer {
		var ip net.IP
		switch a := rr.(type) {
		case *dns.A:
			ip = a.A
		case *dns.AAAA:
			ip = a.AAAA
		default:
			continue
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, addr)
		}
	}
	return out, nil
}

// lookupAll returns the IPv4 then the IPv6 addresses of name.
func (r *resolver) lookupAll(ctx context.Context, name string) ([]netip.Addr, error) {
	v4, err4 := r.lookup(ctx, name, dns.TypeA)
	v6, err6 := r.lookup(ctx, name, dns.TypeAAAA)
	if err4 != nil && err6 != nil {
		return nil, err4
	}
	return append(v4, v6...), nil
}
