package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/store"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means refused
	}{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"example.com:443", "example.com:443"},
		{"*.example.com", "*.example.com"},
		{"*.Example.com:8080", "*.example.com:8080"},
		{"203.0.113.7", "203.0.113.7/32"},
		{"203.0.113.7:80", "203.0.113.7/32:80"},
		{"203.0.113.9/24", "203.0.113.0/24"},
		{"0.0.0.0/0", "0.0.0.0/0"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443"},
		{"[2001:db8::1]", "2001:db8::1/128"},
		{"_srv.example.com", "_srv.example.com"},
		{"", ""},
		{"*", ""},
		{"*.", ""},
		{"**.example.com", ""},
		{"ex*ample.com", ""},
		{"example.com:0", ""},
		{"example.com:65536", ""},
		{"example.com:080", ""},
		{"example.com:", ""},
		{"example.com:http", ""},
		{"exa mple.com", ""},
		{"exa%2emple.com", ""},
		{"example.com\x00.evil.com", ""},
		{"ex\u00e4mple.com", ""},
		{"a..b", ""},
		{".example.com", ""},
		{"-a.example.com", ""},
		{"127.1", ""},
		{"2130706433", ""},
		{"0x7f.0.0.1", ""},
		{"0177.0.0.1", ""},
		{"127.0.0.01", ""},
		{"10.0.0.0/33", ""},
		{"fe80::1%eth0", ""},
		{"[2001:db8::1", ""},
		{"[2001:db8::1]443", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 130) + "com", ""},
	} {
		r, err := ParseRule(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("ParseRule(%q) = %v, want an error", tc.in, r)
			} else if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseRule(%q) error %v is not ErrInvalid", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got := r.String(); got != tc.want {
			t.Errorf("ParseRule(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	ip := netip.MustParseAddr
	yes, no := true, false
	for _, tc := range []struct {
		name  string
		pol   store.NetworkPolicy
		dest  Dest
		allow bool
		rule  string
	}{
		{"nothing said is E2B's internet", store.NetworkPolicy{}, Dest{IP: ip("203.0.113.1"), Port: 80}, true, "internet"},
		{"internet off", store.NetworkPolicy{AllowInternet: &no}, Dest{IP: ip("203.0.113.1"), Port: 80}, false, "default"},
		{"exact name", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"a.example"}}, Dest{Name: "a.example", Port: 443}, true, "a.example"},
		{"name is not a suffix", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"a.example"}}, Dest{Name: "x.a.example", Port: 443}, false, "default"},
		{"suffix matches subdomain", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"*.a.example"}}, Dest{Name: "x.y.a.example", Port: 443}, true, "*.a.example"},
		{"suffix not apex", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"*.a.example"}}, Dest{Name: "a.example", Port: 443}, false, "default"},
		{"suffix not lookalike", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"*.a.example"}}, Dest{Name: "xa.example", Port: 443}, false, "default"},
		{"port rule", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"203.0.113.0/24:8080"}}, Dest{IP: ip("203.0.113.9"), Port: 8080}, true, "203.0.113.0/24:8080"},
		{"port rule other port", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"203.0.113.0/24:8080"}}, Dest{IP: ip("203.0.113.9"), Port: 22}, false, "default"},
		{"name rule needs a name", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"a.example"}}, Dest{IP: ip("203.0.113.9"), Port: 80}, false, "default"},
		{"deny wins", store.NetworkPolicy{AllowOut: []string{"*.a.example"}, DenyOut: []string{"b.a.example"}}, Dest{Name: "b.a.example", Port: 80}, false, "b.a.example"},
		{"deny cidr wins over name", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"a.example"}, DenyOut: []string{"203.0.113.0/24"}}, Dest{Name: "a.example", IP: ip("203.0.113.5"), Port: 80}, false, "203.0.113.0/24"},
		{"E2B allow first", store.NetworkPolicy{AllowFirst: true, AllowOut: []string{"203.0.113.5"}, DenyOut: []string{"0.0.0.0/0"}}, Dest{IP: ip("203.0.113.5"), Port: 80}, true, "203.0.113.5/32"},
		{"E2B deny all else", store.NetworkPolicy{AllowFirst: true, AllowOut: []string{"203.0.113.5"}, DenyOut: []string{"0.0.0.0/0"}}, Dest{IP: ip("203.0.113.6"), Port: 80}, false, "0.0.0.0/0"},
		{"mapped address matches v4 rule", store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"203.0.113.0/24"}}, Dest{IP: ip("::ffff:203.0.113.5"), Port: 80}, true, "203.0.113.0/24"},
		{"internet with deny", store.NetworkPolicy{AllowInternet: &yes, DenyOut: []string{"198.51.100.0/24"}}, Dest{IP: ip("198.51.100.1"), Port: 80}, false, "198.51.100.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := FromStore(&tc.pol)
			if err != nil {
				t.Fatal(err)
			}
			v := p.Decide(tc.dest)
			if v.Allowed != tc.allow || v.Rule != tc.rule {
				t.Errorf("Decide(%+v) = %+v, want allowed=%v rule=%q", tc.dest, v, tc.allow, tc.rule)
			}
		})
	}
}

func TestNilPolicyDeniesAll(t *testing.T) {
	p, err := FromStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Decide(Dest{IP: netip.MustParseAddr("203.0.113.1"), Port: 80}); v.Allowed {
		t.Errorf("nil policy allowed: %+v", v)
	}
	if v := p.Resolvable("example.com"); v.Allowed {
		t.Errorf("nil policy resolves: %+v", v)
	}
}

func TestResolvable(t *testing.T) {
	no := false
	p, err := FromStore(&store.NetworkPolicy{AllowInternet: &no, AllowOut: []string{"a.example:443", "*.b.example"}, DenyOut: []string{"x.b.example:80", "y.b.example"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"a.example": true, "c.b.example": true, "x.b.example": true, "y.b.example": false, "evil.example": false,
	} {
		if v := p.Resolvable(name); v.Allowed != want {
			t.Errorf("Resolvable(%q) = %+v, want %v", name, v, want)
		}
	}
}

func TestFromStoreErrors(t *testing.T) {
	_, err := FromStore(&store.NetworkPolicy{DenyOut: []string{"ok.example", "bad..example"}})
	if err == nil || !strings.Contains(err.Error(), "deny[1]") {
		t.Errorf("error %v does not name deny[1]", err)
	}
	long := make([]string, MaxRules+1)
	for i := range long {
		long[i] = "a.example"
	}
	if _, err := FromStore(&store.NetworkPolicy{AllowOut: long}); err == nil {
		t.Error("more than MaxRules entries accepted")
	}
}

func TestFloor(t *testing.T) {
	f := NewFloor(netip.MustParsePrefix("198.18.0.0/15"))
	for s, want := range map[string]bool{
		"203.0.113.10": false, "198.51.100.1": false, "192.0.2.1": false, "2606:4700::1": false,
		"10.243.0.2": true, "172.31.255.255": true, "192.168.1.1": true, "100.64.0.1": true, "100.127.255.254": true,
		"127.0.0.1": true, "0.0.0.0": true, "0.1.2.3": true, "169.254.169.254": true, "224.0.0.1": true,
		"255.255.255.255": true, "240.0.0.1": true, "::1": true, "::": true, "::ffff:127.0.0.1": true,
		"::ffff:203.0.113.10": true, "::127.0.0.1": true, "64:ff9b::a9fe:a9fe": true, "fd00:ec2::254": true,
		"fc00::1": true, "fe80::1": true, "ff02::1": true, "2002:a9fe:a9fe::1": true, "2001:0:a9fe::1": true,
		"198.18.0.1": true, "192.0.0.170": true,
	} {
		if got := f.Contains(netip.MustParseAddr(s)); got != want {
			t.Errorf("floor contains %s = %v, want %v", s, got, want)
		}
	}
	if !f.Contains(netip.Addr{}) {
		t.Error("the invalid address is not in the floor")
	}
}

func TestParseHost(t *testing.T) {
	for _, tc := range []struct{ in, name, ip string }{
		{"Example.COM.", "example.com", ""},
		{"203.0.113.5", "", "203.0.113.5"},
		{"[2001:db8::1]", "", "2001:db8::1"},
		{"::ffff:127.0.0.1", "", "::ffff:127.0.0.1"},
		{"127.1", "", ""},
		{"evil.com\x00.a.example", "", ""},
		{"a.example%00", "", ""},
		{"", "", ""},
	} {
		name, ip, err := ParseHost(tc.in)
		if tc.name == "" && tc.ip == "" {
			if err == nil {
				t.Errorf("ParseHost(%q) = %q %v, want an error", tc.in, name, ip)
			}
			continue
		}
		if err != nil || name != tc.name || (tc.ip != "" && ip.String() != tc.ip) {
			t.Errorf("ParseHost(%q) = %q %v %v, want %q %q", tc.in, name, ip, err, tc.name, tc.ip)
		}
	}
}

func TestHeaders(t *testing.T) {
	p, err := FromStore(&store.NetworkPolicy{Headers: map[string]map[string]string{"API.Example.": {"x-api-key": "v"}}})
	if err != nil || p.Headers["api.example"]["X-Api-Key"] != "v" {
		t.Fatalf("headers %+v %v", p.Headers, err)
	}
	for _, bad := range []map[string]map[string]string{
		{"a..example": {"X": "v"}},
		{"a.example": {"Bad Header": "v"}},
		{"a.example": {"X": "v\r\nInjected: 1"}},
	} {
		if _, err := FromStore(&store.NetworkPolicy{Headers: bad}); err == nil {
			t.Errorf("header rules %v accepted", bad)
		}
	}
}
