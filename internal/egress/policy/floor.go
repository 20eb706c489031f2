package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// floorPrefixes are never reachable from a sandbox, whatever its policy:
// this host and its neighbours, other sandboxes, cloud metadata, and every
// address form that can smuggle one of those (IPv4-mapped, -compatible,
// NAT64, 6to4 and Teredo IPv6).
var floorPrefixes = []string{
	"0.0.0.0/8",         // "this network"; 0.0.0.0 reaches the host
	"10.0.0.0/8",        // RFC 1918
	"100.64.0.0/10",     // carrier-grade NAT (RFC 6598)
	"127.0.0.0/8",       // loopback
	"169.254.0.0/16",    // link-local, cloud metadata
	"172.16.0.0/12",     // RFC 1918
	"192.0.0.0/24",      // IETF protocol assignments
	"192.168.0.0/16",    // RFC 1918
	"224.0.0.0/4",       // multicast
	"240.0.0.0/4",       // reserved and 255.255.255.255
	"::/128",            // unspecified
	"::1/128",           // loopback
	"::/96",             // IPv4-compatible
	"::ffff:0:0/96",     // IPv4-mapped
	"64:ff9b::/96",      // NAT64
	"64:ff9b:1::/48",    // local-use NAT64
	"2001::/32",         // Teredo
	"2002::/16",         // 6to4
	"fc00::/7",          // unique local, incl. fd00:ec2::254
	"fe80::/10",         // link-local
	"fec0::/10",         // site-local (deprecated)
	"ff00::/8",          // multicast
	"fd00:ec2::254/128", // AWS metadata (inside fc00::/7; named for the reader)
	"100::/64",          // discard-only
	"::ffff:0:0:0/96",   // IPv4-translated
}

// Floor is the set of addresses no policy can open.
type Floor struct {
	prefixes []netip.Prefix
}

// NewFloor returns the platform floor plus extra (operator additions, the
// sandbox range).
func NewFloor(extra ...netip.Prefix) Floor {
	f := Floor{}
	for _, s := range floorPrefixes {
		f.prefixes = append(f.prefixes, netip.MustParsePrefix(s))
	}
	for _, p := range extra {
		f.prefixes = append(f.prefixes, p.Masked())
	}
	return f
}

// ParsePrefixes reads a comma-separated list of CIDRs or addresses (the
// operator's additions to the floor).
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			ip, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Contains reports whether ip is in the floor. An IPv4-mapped address is
// judged both as itself (in the floor) and as the IPv4 address it maps.
func (f Floor) Contains(ip netip.Addr) bool {
	if !ip.IsValid() || ip.Zone() != "" {
		return true
	}
	for _, p := range f.prefixes {
		if p.Contains(ip) || p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}
