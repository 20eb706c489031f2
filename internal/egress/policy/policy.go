package policy

import (
	"net/netip"
	"net/textproto"
	"regexp"
	"strings"

	"github.com/spacesandbox/space/internal/store"
)

// MaxRules bounds each of the allow and deny lists.
const MaxRules = 256

// Policy is one sandbox's parsed egress policy. The zero Policy denies
// everything.
type Policy struct {
	// Internet allows every destination outside the floor that no deny
	// rule matches.
	Internet bool
	// AllowFirst is E2B's precedence: an allow rule that matches wins
	// over a deny rule. Otherwise deny rules win.
	AllowFirst bool
	Allow      []Rule
	Deny       []Rule
	// Headers are added to HTTP(S) requests for a host (normalised name
	// -> canonical header name -> value).
	Headers map[string]map[string]string
}

// FromStore parses a stored policy. A nil policy denies everything (the
// native API's default); an unset AllowInternet means allowed (E2B's
// default; the native API always sets it).
func FromStore(p *store.NetworkPolicy) (Policy, error) {
	if p == nil {
		return Policy{}, nil
	}
	out := Policy{Internet: p.AllowInternet == nil || *p.AllowInternet, AllowFirst: p.AllowFirst}
	var err error
	if out.Allow, err = parseList("allow", p.AllowOut); err != nil {
		return Policy{}, err
	}
	if out.Deny, err = parseList("deny", p.DenyOut); err != nil {
		return Policy{}, err
	}
	if out.Headers, err = parseHeaders(p.Headers); err != nil {
		return Policy{}, err
	}
	return out, nil
}

var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]{1,64}$`)

// parseHeaders checks header rules: hosts are names, header names
// tokens, values free of CR, LF and NUL.
func parseHeaders(in map[string]map[string]string) (map[string]map[string]string, error) {
	if len(in) > MaxRules {
		return nil, invalid("at most %d header rules", MaxRules)
	}
	var out map[string]map[string]string
	for host, hs := range in {
		name, err := NormalizeName(host)
		if err != nil {
			return nil, invalid("header rule host %q: %s", host, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		}
		for k, v := range hs {
			if !headerName.MatchString(k) || len(v) > 8<<10 || strings.ContainsAny(v, "\r\n\x00") {
				return nil, invalid("header rule for %s: bad header %q or value", name, k)
			}
			if out == nil {
				out = map[string]map[string]string{}
			}
			if out[name] == nil {
				out[name] = map[string]string{}
			}
			out[name][textproto.CanonicalMIMEHeaderKey(k)] = v
		}
	}
	return out, nil
}

func parseList(which string, in []string) ([]Rule, error) {
	if len(in) > MaxRules {
		return nil, invalid("at most %d %s entries", MaxRules, which)
	}
	out := make([]Rule, 0, len(in))
	for i, s := range in {
		r, err := ParseRule(s)
		if err != nil {
			return nil, invalid("%s[%d]: %s", which, i, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		}
		out = append(out, r)
	}
	return out, nil
}

// Dest is a destination as the gateway knows it: a name (from HTTP Host,
// TLS SNI or a DNS question; may be empty), the address it will dial
// (may be invalid when only the name is known) and the port (0: any).
type Dest struct {
	Name string
	IP   netip.Addr
	Port uint16
}

// Verdict is a decision and the rule that made it, for the audit log.
type Verdict struct {
	Allowed bool
	// Rule is the matching entry's canonical spelling, or "internet" or
	// "default".
	Rule string
}

// Decide says whether the sandbox may reach d. The floor is not part of
// it: the gateway checks every address against the floor first.
func (p Policy) Decide(d Dest) Verdict {
	allow, allowOK := first(p.Allow, d)
	deny, denyOK := first(p.Deny, d)
	switch {
	case allowOK && (p.AllowFirst || !denyOK):
		return Verdict{Allowed: true, Rule: allow.String()}
	case denyOK:
		return Verdict{Rule: deny.String()}
	case p.Internet:
		return Verdict{Allowed: true, Rule: "internet"}
	}
	return Verdict{Rule: "default"}
}

func first(rules []Rule, d Dest) (Rule, bool) {
	for _, r := range rules {
		if r.Matches(d) {
			return r, true
		}
	}
	return Rule{}, false
}

// Matches reports whether r covers d. A name rule needs d's name, an
// address rule d's address; a port rule needs d's port to be that port,
// and a destination with no port (a DNS question) matches only rules
// that leave the port open when they deny, and any rule when they allow:
// see Resolvable.
func (r Rule) Matches(d Dest) bool {
	if r.Port != 0 && d.Port != 0 && r.Port != d.Port {
		return false
	}
	if r.IsName() {
		if d.Name == "" {
			return false
		}
		if r.Suffix {
			return strings.HasSuffix(d.Name, "."+r.Name)
		}
		return d.Name == r.Name
	}
	return d.IP.IsValid() && r.Prefix.Contains(d.IP.Unmap())
}

// Resolvable says whether the sandbox's resolver may answer for name:
// some port of it is allowed. Only a deny rule without a port hides a
// name entirely.
func (p Policy) Resolvable(name string) Verdict {
	d := Dest{Name: name}
	var allow, deny Rule
	allowOK, denyOK := false, false
	for _, r := range p.Allow {
		if r.IsName() && r.Matches(d) {
			allow, allowOK = r, true
			break
		}
	}
	for _, r := range p.Deny {
		if r.IsName() && r.Port == 0 && r.Matches(d) {
			deny, denyOK = r, true
			break
		}
	}
	switch {
	case allowOK && (p.AllowFirst || !denyOK):
		return Verdict{Allowed: true, Rule: allow.String()}
	case denyOK:
		return Verdict{Rule: deny.String()}
	case p.Internet:
		return Verdict{Allowed: true, Rule: "internet"}
	}
	return Verdict{Rule: "default"}
}
