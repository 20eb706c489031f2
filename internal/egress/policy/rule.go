// Package policy is a sandbox's egress policy: the rules a caller gives
// (domains, *.suffix, CIDRs, each with an optional port), how they are
// parsed and normalised, and the decision for one destination. The
// platform floor that no policy lifts is in floor.go.
package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allow or deny entry.
type Rule struct {
	// Raw is the entry as given, for audit logs and error messages.
	Raw string
	// Name is an exact host name (lower case, no trailing dot) or, with
	// Suffix, the parent every subdomain of which matches.
	Name   string
	Suffix bool
	// Prefix is set for address rules (a bare address is a /32 or /128).
	Prefix netip.Prefix
	// Port is 0 for any port.
	Port uint16
}

// IsName reports whether r matches host names rather than addresses.
func (r Rule) IsName() bool { return r.Name != "" }

// String is the rule in its canonical spelling.
func (r Rule) String() string {
	var h string
	switch {
	case r.Suffix:
		h = "*." + r.Name
	case r.IsName():
		h = r.Name
	case r.Prefix.Addr().Is6() && r.Port != 0:
		h = "[" + r.Prefix.String() + "]"
	default:
		h = r.Prefix.String()
	}
	if r.Port != 0 {
		h += ":" + strconv.Itoa(int(r.Port))
	}
	return h
}

// ErrInvalid classes every parse error of this package.
var ErrInvalid = errors.New("invalid network rule")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// MaxRuleLen bounds one entry: a 253-character name, "*." and ":65535".
const MaxRuleLen = 253 + 2 + 6

// ParseRule parses one entry: "example.com", "*.example.com", "203.0.113.0/24",
// "203.0.113.7", "2001:db8::/32", each optionally with ":port" (IPv6 in
// brackets then: "[2001:db8::1]:443"). Names are normalised (lower case,
// one trailing dot dropped); anything odd is refused rather than guessed.
func ParseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, invalid("empty entry")
	}
	if len(s) > MaxRuleLen {
		return Rule{}, invalid("entry longer than %d characters", MaxRuleLen)
	}
	host, port, err := splitPort(s)
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Raw: s, Port: port}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, invalid("%q is not a CIDR (%v)", host, err)
		}
		if p.Addr().Zone() != "" {
			return Rule{}, invalid("%q: zones are not allowed", host)
		}
		r.Prefix = p.Masked()
		return r, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return Rule{}, invalid("%q: zones are not allowed", host)
		}
		r.Prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Suffix, host = true, rest
	}
	name, err := NormalizeName(host)
	if err != nil {
		return Rule{}, err
	}
	r.Name = name
	return r, nil
}

// splitPort separates an optional ":port". A string with more than one
// colon is an IPv6 address or prefix unless it is bracketed.
func splitPort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, invalid("%q: missing ]", s)
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, invalid("%q: expected :port after ]", s)
		}
		port, err := parsePort(p)
		return host, port, err
	}
	if strings.Count(s, ":") != 1 {
		return s, 0, nil
	}
	host, p, _ := strings.Cut(s, ":")
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(p string) (uint16, error) {
	if p == "" || len(p) > 5 || strings.TrimLeft(p, "0123456789") != "" || (len(p) > 1 && p[0] == '0') {
		return 0, invalid("port %q must be a number from 1 to 65535", p)
	}
	n, _ := strconv.Atoi(p)
	if n < 1 || n > 65535 {
		return 0, invalid("port %q must be a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

// NormalizeName returns the canonical form of a DNS host name: ASCII lower
// case without one trailing dot. It refuses what is not a plain name:
// control and NUL bytes, percent-encoding, spaces, non-ASCII (send IDNs in
// punycode), empty or over-long labels, and spellings of an address
// ("127.1", "0x7f.0.0.1", "2130706433"), which a resolver or libc might
// read as an IP.
func NormalizeName(s string) (string, error) {
	if s == "" {
		return "", invalid("empty host name")
	}
	if len(s) > 254 {
		return "", invalid("host name longer than 253 characters")
	}
	n := strings.TrimSuffix(s, ".")
	if n == "" {
		return "", invalid("host name %q is only a dot", s)
	}
	b := []byte(n)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return "", invalid("host name %q has a character that is not allowed (%q)", s, c)
		}
	}
	n = string(b)
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" {
			return "", invalid("host name %q has an empty label", s)
		}
		if len(l) > 63 {
			return "", invalid("host name %q has a label longer than 63 characters", s)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", invalid("host name %q has a label that starts or ends with '-'", s)
		}
	}
	if looksNumeric(labels[len(labels)-1]) {
		return "", invalid("host name %q looks like an address; write addresses in dotted decimal", s)
	}
	return n, nil
}

// looksNumeric: a last label that is all digits, or hex with 0x, is how
// inet_aton-style spellings of addresses end ("127.1", "0x7f000001").
func looksNumeric(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return h == "" || strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// ParseHost reads a host as a client names it (HTTP Host, TLS SNI, a DNS
// question): an address literal (IPv6 optionally in brackets) or a name,
// normalised as NormalizeName does. A port must have been removed.
func ParseHost(s string) (name string, ip netip.Addr, err error) {
	if v6, ok := strings.CutPrefix(s, "["); ok {
		v6, ok = strings.CutSuffix(v6, "]")
		if !ok {
			return "", netip.Addr{}, invalid("host %q: missing ]", s)
		}
		s = v6
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, invalid("host %q: zones are not allowed", s)
		}
		return "", ip, nil
	}
	name, err = NormalizeName(s)
	return name, netip.Addr{}, err
}
