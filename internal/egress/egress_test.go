package egress

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/egress/secrets"
)

// clientHello returns the first record a real TLS client sends for sni.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	c, s := net.Pipe()
	go func() {
		tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(s)
	hdr, err := br.Peek(5)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := br.Peek(5 + (int(hdr[3])<<8 | int(hdr[4])))
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), rec...)
	s.Close()
	c.Close()
	return out
}

func TestReadClientHello(t *testing.T) {
	for _, sni := range []string{"api.example.com", "Mixed.Example.COM"} {
		info, err := readClientHello(clientHello(t, sni))
		if err != nil || info.ServerName != strings.ToLower(sni) && info.ServerName != sni {
			t.Errorf("SNI %q: got %+v %v", sni, info, err)
		}
	}
	rec := clientHello(t, "api.example.com")
	if _, err := readClientHello(rec[:len(rec)/2]); err == nil {
		t.Error("a truncated ClientHello parsed")
	}
}

func TestCheckRequest(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		ok        bool
	}{
		{"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example", true},
		{"GET / HTTP/1.1\r\nHost: A.Example.:8080\r\n\r\n", "a.example", true},
		{"GET / HTTP/1.1\r\nHost: b.example\r\n\r\n", "a.example", false},
		{"GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example", false},
		{"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "a.example", false},
		{"GET / HTTP/1.1\r\nHost: 203.0.113.5\r\n\r\n", "", true},
		{"GET / HTTP/1.1\r\nHost: 203.0.113.5\r\n\r\n", "a.example", false},
		{"GET / HTTP/1.0\r\n\r\n", "", true},
		{"GET / HTTP/1.1\r\nHost: a%2eexample\r\n\r\n", "a.example", false},
		{"GET / HTTP/1.1\r\nHost: 127.1\r\n\r\n", "", false},
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
		if err != nil {
			if tc.ok {
				t.Errorf("%q: %v", tc.raw, err)
			}
			continue
		}
		if err := checkRequest(req, tc.want); (err == nil) != tc.ok {
			t.Errorf("checkRequest(%q, %q) = %v, want ok=%v", tc.raw, tc.want, err, tc.ok)
		}
	}
}

func TestBound(t *testing.T) {
	m := secrets.Meta{Binding: secrets.Binding{Host: "api.example", Port: 443, PathPrefix: "/v1/"}}
	for _, tc := range []struct {
		host, path string
		port       uint16
		want       bool
	}{
		{"api.example", "/v1/chat", 443, true},
		{"api.example", "/v2/chat", 443, false},
		{"api.example", "/v1/../admin", 443, false},
		{"api.example", "/v1/chat", 80, false},
		{"evil.example", "/v1/chat", 443, false},
		{"", "/v1/chat", 443, false},
	} {
		req, _ := http.NewRequest("GET", "http://x"+tc.path, nil)
		req.URL.Path = tc.path
		if got := bound(m, tc.host, tc.port, req); got != tc.want {
			t.Errorf("bound(%s:%d%s) = %v", tc.host, tc.port, tc.path, got)
		}
	}
}

func TestRuleset(t *testing.T) {
	cidr := netip.MustParsePrefix("10.243.0.0/24")
	if got := TableName(cidr); got != "space_egress_10_243_0_0_24" {
		t.Errorf("table %q", got)
	}
	r := ruleset(TableName(cidr), "vse", cidr, 1000, 2000)
	for _, want := range []string{
		`iifname "vse*" ip saddr 10.243.0.0/24 ip saddr @egress meta l4proto tcp redirect to :1000`,
		`iifname "vse*" ip saddr 10.243.0.0/24 udp dport 53 redirect to :2000`,
		`iifname "vse*" ip saddr 10.243.0.0/24 counter drop`,
		"delete table inet space_egress_10_243_0_0_24",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, r)
		}
	}
}

func TestSetDiff(t *testing.T) {
	set := func(s ...string) map[netip.Addr]bool {
		m := map[netip.Addr]bool{}
		for _, a := range s {
			m[netip.MustParseAddr(a)] = true
		}
		return m
	}
	list := func(s ...string) []netip.Addr {
		var l []netip.Addr
		for _, a := range s {
			l = append(l, netip.MustParseAddr(a))
		}
		return l
	}
	for _, tc := range []struct {
		name       string
		have, want map[netip.Addr]bool
		add, del   []netip.Addr
	}{
		{"unknown, empty", nil, set(), nil, nil},
		{"unknown: add all", nil, set("10.0.0.6", "10.0.0.2"), list("10.0.0.2", "10.0.0.6"), nil},
		{"same", set("10.0.0.2"), set("10.0.0.2"), nil, nil},
		{"one new", set("10.0.0.2"), set("10.0.0.2", "10.0.0.10"), list("10.0.0.10"), nil},
		{"one gone", set("10.0.0.2", "10.0.0.10"), set("10.0.0.10"), nil, list("10.0.0.2")},
		{"all gone", set("10.0.0.2", "10.0.0.3"), set(), nil, list("10.0.0.2", "10.0.0.3")},
		{"both", set("10.0.0.2", "10.0.0.3"), set("10.0.0.3", "10.0.0.9", "10.0.0.4"), list("10.0.0.4", "10.0.0.9"), list("10.0.0.2")},
	} {
		add, del := setDiff(tc.have, tc.want)
		if !slices.Equal(add, tc.add) || !slices.Equal(del, tc.del) {
			t.Errorf("%s: add %v del %v, want add %v del %v", tc.name, add, del, tc.add, tc.del)
		}
	}
}

func TestPlaceholderPattern(t *testing.T) {
	p := secrets.NewPlaceholder("open-ai_1")
	if got := placeholderRe.FindString("Bearer " + p + "x"); got != p {
		t.Errorf("found %q in a header holding %q", got, p)
	}
}

func TestConnCount(t *testing.T) {
	var c connCount
	for range maxConnsPerSandbox {
		if !c.acquire("a") {
			t.Fatal("refused below the limit")
		}
	}
	if c.acquire("a") {
		t.Error("accepted above the limit")
	}
	if !c.acquire("b") {
		t.Error("one sandbox's connections count against another")
	}
	c.release("a")
	if !c.acquire("a") {
		t.Error("a released slot is not reusable")
	}
}
