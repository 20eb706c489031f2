package dialer

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// fakeLocal is a node whose interfaces hold addrs (CIDR notation) and
// whose cluster peers are peers.
func fakeLocal(addrs []string, peers ...string) *Local {
	var p Peers
	if peers != nil {
		p = func(context.Context) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, s := range peers {
				out = append(out, netip.MustParseAddr(s))
			}
			return out, nil
		}
	}
	l := NewLocal(p, nil)
	l.ifaces = func() ([]net.Addr, error) {
		var out []net.Addr
		for _, s := range addrs {
			ip, n, err := net.ParseCIDR(s)
			if err != nil {
				panic(err)
			}
			n.IP = ip
			out = append(out, n)
		}
		return out, nil
	}
	return l
}

const (
	byNode  = "an address of this node"
	byFloor = "in the platform floor"
)

func TestCheck(t *testing.T) {
	// 198.51.100.7 and 2001:db8::7 stand for the host's public addresses:
	// documentation ranges, outside the platform floor, as on this CI
	// machine's main interface.
	node := fakeLocal([]string{"127.0.0.1/8", "::1/128", "198.51.100.7/24", "2001:db8::7/64", "fe80::1/64"}, "203.0.113.50")
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		ip   string
		want string // "" allowed, else the reason's start
	}{
		{"public address", Config{}, "198.51.100.8", ""},
		{"public IPv6 address", Config{}, "2001:db8::8", ""},
		{"host's main address", Config{}, "198.51.100.7", byNode},
		{"host's main address, IPv4-mapped", Config{}, "::ffff:198.51.100.7", byNode},
		{"host's IPv6 address", Config{}, "2001:db8::7", byNode},
		{"host's link-local address with a zone", Config{}, "fe80::1%eth0", byNode},
		{"loopback", Config{}, "127.0.0.1", byNode},
		{"loopback elsewhere in 127/8", Config{}, "127.0.0.2", byFloor},
		{"IPv6 loopback", Config{}, "::1", byNode},
		{"a cluster peer", Config{}, "203.0.113.50", byNode},
		{"a cluster peer, IPv4-mapped", Config{}, "::ffff:203.0.113.50", byNode},
		{"private", Config{}, "10.1.2.3", byFloor},
		{"private, IPv4-mapped", Config{}, "::ffff:10.1.2.3", byFloor},
		{"metadata", Config{}, "169.254.169.254", byFloor},
		{"AWS IPv6 metadata", Config{}, "fd00:ec2::254", byFloor},
		{"unspecified", Config{}, "0.0.0.0", byFloor},
		{"NAT64 of loopback", Config{}, "64:ff9b::7f00:1", byFloor},
		{"operator's floor", Config{Floor: pfx("198.51.100.128/25")}, "198.51.100.200", byFloor},
		{"allowed loopback", Config{Allow: pfx("127.0.0.1/32")}, "127.0.0.1", ""},
		{"allowed loopback, IPv4-mapped", Config{Allow: pfx("127.0.0.1/32")}, "::ffff:127.0.0.1", ""},
		{"allow is exact", Config{Allow: pfx("127.0.0.1/32")}, "127.0.0.2", byFloor},
		{"allowed host address", Config{Allow: pfx("198.51.100.7/32")}, "198.51.100.7", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Local = node
			err := New(tc.cfg).Check(netip.MustParseAddr(tc.ip))
			var r *RefusedError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.As(err, &r) || !strings.HasPrefix(r.Reason, tc.want)):
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// TestHostAddrs: every address of this host's interfaces, as the kernel
// lists them now, is refused by a dialer with no allow list.
func TestHostAddrs(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil || len(addrs) == 0 {
		t.Fatalf("interface addresses: %v %v", addrs, err)
	}
	d := New(Config{})
	for _, a := range addrs {
		p := netip.MustParsePrefix(a.String())
		if err := d.Check(p.Addr()); !IsRefused(err) {
			t.Errorf("%s (this host's) is not refused: %v", p.Addr(), err)
		}
	}
}

// listen opens a loopback listener and returns its port and a function
// that says whether the first connection it accepts is the one from
// local (so nothing came before it).
func listen(t *testing.T) (port string, firstIs func(local net.Addr) bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, func(local net.Addr) bool {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.RemoteAddr().String() == local.String()
	}
}

// TestDialRefusedBeforeConnect: the check runs on the address dialled, so
// a name or another spelling of a refused address is refused too, and
// nothing reaches the listener; an allowed address connects.
func TestDialRefusedBeforeConnect(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, host string
		allow      []netip.Prefix
		reason     string // "" connects
	}{
		{"loopback", "127.0.0.1", nil, byNode},
		{"a name that resolves to loopback", "localhost", nil, byNode},
		{"IPv4-mapped loopback", "::ffff:127.0.0.1", nil, byNode},
		{"allowed", "127.0.0.1", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, ""},
		{"allowed, by name", "localhost", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, firstIs := listen(t)
			c, err := New(Config{Allow: tc.allow}).DialContext(ctx, "tcp", net.JoinHostPort(tc.host, port))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("allowed dial: %v", err)
				}
				defer c.Close()
				if !firstIs(c.LocalAddr()) {
					t.Fatal("the listener got another connection first")
				}
				return
			}
			var r *RefusedError
			if !errors.As(err, &r) || !strings.HasPrefix(r.Reason, tc.reason) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("err = %v, want refused: %s", err, tc.reason)
			}
			// Positive control: the listener is there, and the first
			// connection it gets is the control's (the refused one never
			// reached it).
			ctl, err := net.Dial("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Fatalf("control: %v", err)
			}
			defer ctl.Close()
			if !firstIs(ctl.LocalAddr()) {
				t.Fatal("the refused dial reached the listener")
			}
		})
	}
}

// TestTransport: an HTTP client on the dialer's transport is refused the
// same way, and uses no proxy from the environment (which would be
// dialled, and checked, instead of the destination).
func TestTransport(t *testing.T) {
	port, firstIs := listen(t)
	tr := New(Config{}).Transport()
	if tr.Proxy != nil {
		t.Error("the transport takes a proxy")
	}
	_, err := (&http.Client{Transport: tr}).Get("http://127.0.0.1:" + port + "/")
	if !IsRefused(err) {
		t.Fatalf("err = %v, want refused", err)
	}
	ctl, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if !firstIs(ctl.LocalAddr()) {
		t.Fatal("the refused request reached the listener")
	}
}

// TestLocalKeepsLastOnError: a failed interface lookup does not forget
// the addresses found before.
func TestLocalKeepsLastOnError(t *testing.T) {
	l := fakeLocal([]string{"198.51.100.7/24"})
	if !l.Has(netip.MustParseAddr("198.51.100.7")) {
		t.Fatal("first lookup")
	}
	l.ifaces = func() ([]net.Addr, error) { return nil, errors.New("netlink: no") }
	l.ownAt = l.ownAt.Add(-2 * localTTL)
	if !l.Has(netip.MustParseAddr("198.51.100.7")) {
		t.Fatal("the address was forgotten after a failed lookup")
	}
}
