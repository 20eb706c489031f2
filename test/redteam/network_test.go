package redteam

// Network attempts against today's deny-all egress. They live in this file
// of their own so that the egress gateway's attack suite can extend them.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

const (
	nft      = "nftables (the daemon's table space_egress_<range>): from a vse* interface only DNS and, for sandboxes whose policy allows egress, TCP redirected to the egress gateway reach the host, besides replies to connections the host opened; nothing is forwarded to or from vse*"
	netstack = "gVisor netstack: the sandbox's only interface is its veth; no raw sockets"
)

// netFixture holds the host-side listeners the attempts must not reach.
type netFixture struct {
	tcpHits, udpHits, nsTCPHits, nsUDPHits *atomic.Int64
	base                                   map[*atomic.Int64]int64 // counts after the host's own control dials
}

var netFix netFixture

// listenersQuiet: none of the host-side listeners counted anything.
func listenersQuiet() error {
	for name, n := range map[string]*atomic.Int64{"host TCP": netFix.tcpHits, "host UDP": netFix.udpHits, "test namespace TCP": netFix.nsTCPHits, "test namespace UDP": netFix.nsUDPHits} {
		if v := n.Load() - netFix.base[n]; v != 0 {
			return fmt.Errorf("the %s listener received %d connections or packets from the sandbox", name, v)
		}
	}
	return nil
}

// dnsRefused: no DNS query got an answer record, and no listener behind
// the host or in the test namespace saw a packet.
func dnsRefused(r res) error {
	m, ok := r["res"].(map[string]any)
	if !ok || len(m) == 0 {
		return fmt.Errorf("no probe results: %v", r)
	}
	for target, v := range m {
		if s, _ := v.(string); strings.Contains(s, "an=") && !strings.HasSuffix(s, "an=0") {
			return fmt.Errorf("%s answered a name the policy does not allow (%s)", target, s)
		}
	}
	return listenersQuiet()
}

// dropped: every probe in R['res'] was dropped on the way (a timeout, no
// answer, or no route), except those whose target starts with one of
// own, the sandbox's own loopback, which must not connect either. A
// refusal (RST) from elsewhere means a packet got through to someone.
func dropped(own ...string) func(res) error {
	return func(r res) error {
		m, ok := r["res"].(map[string]any)
		if !ok || len(m) == 0 {
			return fmt.Errorf("no probe results: %v", r)
		}
		for _, target := range sortedKeys(m) {
			s, _ := m[target].(string)
			isOwn := slices.ContainsFunc(own, func(p string) bool { return strings.HasPrefix(target, p) })
			switch {
			case s == "connected" || s == "answered" || s == "reply":
				return fmt.Errorf("reached %s (%s)", target, s)
			case isOwn:
			case s == "timeout" || s == "no answer" || s == "no reply" || s == "error:ENETUNREACH" || s == "error:EHOSTUNREACH":
			default:
				return fmt.Errorf("%s: %s, want the packets dropped (a timeout or no route)", target, s)
			}
		}
		return listenersQuiet()
	}
}

const probesCtl = "the same probes reach a TCP listener, a UDP echo server and an ICMP echo on the sandbox's own loopback"

func networkAttempts() []attempt {
	return []attempt{
		{id: "net-host-spaced", family: "net-host-tcp", desc: "TCP to spaced's port on the host end of the sandbox's veth", stops: nft,
			control: probesCtl, py: "net.host_spaced", check: dropped()},
		{id: "net-host-listener", family: "net-host-tcp", desc: "TCP to a host listener on 0.0.0.0 through the veth's host address (the host itself reaches it there)", stops: nft,
			control: probesCtl, py: "net.host_listener", check: dropped()},
		{id: "net-host-ports", family: "net-host-tcp", desc: "TCP to well-known host ports (ssh, http, docker, etcd, kubelet, the agent's port) on the veth's host address (53 is the egress gateway's DNS: net-udp-dns)", stops: nft,
			control: probesCtl, py: "net.host_ports", check: dropped()},
		{id: "net-host-other-ifaces", family: "net-host-tcp", desc: "TCP to the host's other interface addresses (spaced's port and a listener)", stops: nft,
			control: probesCtl, py: "net.host_other_ifaces", check: dropped()},
		{id: "net-host-loopback", desc: "127.0.0.1, 127.0.0.2 and localhost at spaced's port and a host listener's (the host's loopback)", stops: netstack + ": 127.0.0.1 is the sandbox's own loopback (a listener of the sandbox's own answers at spaced's port there)",
			control: probesCtl, py: "net.host_loopback", check: all(dropped("127.", "localhost"), equals("own", "SANDBOX"))},
		{id: "net-neighbour-agent", family: "net-neighbour", desc: "TCP to the neighbour sandbox's agent port", stops: nft,
			control: probesCtl, py: "net.neighbour_agent", check: dropped()},
		{id: "net-neighbour-ports", family: "net-neighbour", desc: "TCP to a server the neighbour runs (the host reaches it) and to common ports of the neighbour", stops: nft,
			control: probesCtl, py: "net.neighbour_ports", check: dropped()},
		{id: "net-neighbour-desktop", family: "net-neighbour", desc: "TCP to a desktop's X11 (6000, 6001), VNC (5900, 5910), noVNC (6080), DevTools (9222) and computer-use (49990) ports on the neighbour, where stand-ins listen (the host reaches them)", stops: nft,
			control: probesCtl + "; the host reaches the neighbour's stand-in on 6000", py: "net.neighbour_desktop", check: dropped()},
		{id: "net-other-slots", family: "net-neighbour", desc: "TCP to the agent port of every address in the first sandbox slots (other sandboxes, present or future)", stops: nft,
			control: probesCtl, py: "net.other_slots", check: dropped()},
		{id: "net-metadata", family: "net-namespace-tcp", desc: "TCP to 169.254.169.254 (cloud metadata), given to a host in a test namespace that answers the host", stops: nft,
			control: probesCtl, py: "net.metadata", check: dropped()},
		{id: "net-cgnat", family: "net-namespace-tcp", desc: "TCP to 100.64.0.1 (shared address space), given to a host in a test namespace that answers the host", stops: nft,
			control: probesCtl, py: "net.cgnat", check: dropped()},
		{id: "net-internet", family: "net-namespace-tcp", desc: "TCP to a stand-in for the internet (198.51.100.10) behind the host, with IP forwarding on", stops: nft,
			control: probesCtl, py: "net.internet", check: dropped()},
		{id: "net-ipv6", desc: "IPv6: the host's link-local and global addresses, the test namespace's 2001:db8:245::10, and ::1 at spaced's port", stops: netstack + " (no IPv6 route out); " + nft,
			control: probesCtl, py: "net.ipv6", check: dropped("[::1]")},
		{id: "net-icmp", desc: "ICMP echo (unprivileged ICMP sockets) to the host, the neighbour, the metadata address and the internet stand-in", stops: nft + "; " + netstack,
			control: probesCtl, py: "net.icmp", check: dropped()},
		{id: "net-udp-host", family: "net-udp", desc: "UDP to a host listener through the veth address and every host address, and broadcast", stops: nft,
			control: probesCtl, py: "net.udp_host", check: dropped()},
		{id: "net-udp-dns", desc: "DNS queries over UDP and TCP to the host, 169.254.169.254 and the internet stand-in, from a sandbox whose policy allows nothing", stops: nft + "; the egress gateway's DNS server takes every query to port 53 and answers only names the policy allows",
			control: "the gateway's DNS server answers (REFUSED) at the host end of the veth", py: "net.udp_dns", check: dnsRefused},
		{id: "net-udp-namespace", family: "net-udp", desc: "UDP to listeners on 169.254.169.254, 100.64.0.1 and the internet stand-in", stops: nft,
			control: probesCtl, py: "net.udp_namespace", check: dropped()},
		{id: "net-udp-neighbour", family: "net-udp", desc: "UDP to the neighbour's address", stops: nft,
			control: probesCtl, py: "net.udp_neighbour", check: dropped()},
		{id: "net-spoof-source", desc: "bind to the neighbour's address, the host's and 169.254.169.254 as a source (IP spoofing)", stops: netstack + ": only the sandbox's own address can be bound (EADDRNOTAVAIL)",
			control: "binding the sandbox's own address works", py: "net.spoof_source", check: allRefusedWith("errs", "EADDRNOTAVAIL")},
		{id: "net-ip-transparent", desc: "IP_TRANSPARENT and IP_FREEBIND, then bind to the neighbour's address; SO_BINDTODEVICE lo, then connect to a host listener", stops: netstack + ": the options are accepted but binding another address still fails (EADDRNOTAVAIL); through lo nothing of the host is reached",
			control: "with IP_TRANSPARENT set, binding the sandbox's own address works", py: "net.ip_transparent", check: all(allRefusedWith("errs", "EADDRNOTAVAIL", "EPERM"), func(r res) error {
				if r.s("bindtodevice") == "connected" {
					return fmt.Errorf("a socket bound to lo reached the host listener")
				}
				return listenersQuiet()
			})},
		{id: "net-route-table", desc: "read the routing and neighbour tables for other sandboxes and host networks", stops: netstack + ": one interface, one default route",
			control: "the routes through eth0 are read", py: "net.route_table", check: emptyList("other")},
	}
}

// hostAddrs are the host's own addresses (loopback, sandbox veths and test
// links left out).
func hostAddrs(t *testing.T, family string) []string {
	out, err := exec.Command("ip", "-o", family, "addr", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] == "lo" || strings.HasPrefix(f[1], "vse") || strings.HasPrefix(f[1], "e2e") || strings.HasPrefix(f[1], "rt") {
			continue
		}
		ip := strings.Split(f[3], "/")[0]
		if family == "-6" && strings.HasPrefix(ip, "fe80") {
			continue
		}
		ips = append(ips, ip)
	}
	return ips
}

// countTCP counts the connections a listener accepts until the test ends.
func countTCP(t *testing.T, ln net.Listener) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return &n
}

func countUDP(t *testing.T, pc net.PacketConn) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			_, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			n.Add(1)
		}
	}()
	t.Cleanup(func() { pc.Close() })
	return &n
}

// testNamespace makes a network namespace of the test's own (a
// harness.TestHost), reachable from the host, holding 198.51.100.10 (an
// internet stand-in), 169.254.169.254, 100.64.0.1 and 2001:db8:245::10.
func testNamespace(t *testing.T) *harness.TestHost {
	host, err := harness.NewTestHost(harness.TestHostOptions{
		Prefix:    "rt",
		HostAddrs: []string{"198.51.100.1/24", "2001:db8:245::1/64"},
		Addrs:     []string{"198.51.100.10/24", "169.254.169.254/32", "100.64.0.1/32", "2001:db8:245::10/64"},
		Gateway:   "198.51.100.1",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	for _, dst := range []string{"169.254.169.254/32", "100.64.0.1/32"} {
		if err := host.Route(dst, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return host
}

func TestNetwork(t *testing.T) {
	d := need(t)
	t.Parallel()
	n := getNeighbour(t, d)
	a := d.NewSandbox(t, client.CreateSandboxRequest{})
	if _, err := d.Client.StartBackground(harness.Ctx(t, 10*time.Second), n.sb.ID, client.CommandRequest{Cmd: "python3 -m http.server 8000", Tag: "rt-http", TimeoutSeconds: 300}); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	netFix.tcpHits = countTCP(t, ln)
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	netFix.udpHits = countUDP(t, pc)

	host := testNamespace(t)
	nsLn, err := host.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	nsPC, err := host.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	netFix.nsTCPHits, netFix.nsUDPHits = countTCP(t, nsLn), countUDP(t, nsPC)
	nsPort := strconv.Itoa(nsLn.Addr().(*net.TCPAddr).Port)
	for _, target := range []string{"198.51.100.10:" + nsPort, "169.254.169.254:" + nsPort, "100.64.0.1:" + nsPort, "[2001:db8:245::10]:" + nsPort} {
		c, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			t.Fatalf("control: the host cannot reach %s in the test namespace: %v", target, err)
		}
		c.Close()
	}
	old, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	t.Cleanup(func() { os.WriteFile("/proc/sys/net/ipv4/ip_forward", old, 0o644) })

	hostIP, selfIP := vethAddrs(t, a.ID)
	_, bIP := vethAddrs(t, n.sb.ID)
	_, spacedPort, _ := net.SplitHostPort(d.Addr)
	var v6 []string
	if out, err := exec.Command("ip", "-o", "-6", "addr", "show", "dev", "vse"+a.ID[:12]).Output(); err == nil {
		if m := regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+)/`).FindStringSubmatch(string(out)); m != nil {
			v6 = append(v6, m[1]+"%eth0")
		}
	}
	v6 = append(v6, hostAddrs(t, "-6")...)
	cfg, _ := json.Marshal(map[string]any{
		"host": hostIP, "self": selfIP, "neighbour": bIP, "spaced": spacedPort,
		"tcp": strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), "udp": strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port),
		"ns": nsPort, "nsudp": strconv.Itoa(nsPC.LocalAddr().(*net.UDPAddr).Port),
		"hostAddrs": hostAddrs(t, "-4"), "hostAddrs6": v6, "bcast": broadcastOf(hostIP),
	})
	// The controls: from the host the neighbour's server answers, so a
	// refusal seen from the sandbox is the firewall's doing.
	if !harness.WaitFor(10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(bIP, "8000"), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("control: the host cannot reach the neighbour's server at %s:8000", bIP)
	}
	// The desktop ports' stand-ins (net-neighbour-desktop): an X server
	// that listened on TCP would be reachable from the host, not from
	// another sandbox.
	if err := desktopStandIns(t, d, n.sb.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(bIP, "6000"), 2*time.Second); err != nil {
		t.Fatalf("control: the host cannot reach the neighbour's stand-in at %s:6000: %v", bIP, err)
	} else {
		c.Close()
	}
	// The listeners count: the host reaches them through the veth's host
	// address, where the sandbox will try.
	before := map[*atomic.Int64]int64{netFix.tcpHits: netFix.tcpHits.Load(), netFix.udpHits: netFix.udpHits.Load()}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(hostIP, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), 2*time.Second); err != nil {
		t.Fatalf("control: the host cannot reach its own listener at %s: %v", hostIP, err)
	} else {
		c.Close()
	}
	if c, err := net.Dial("udp", net.JoinHostPort(hostIP, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))); err == nil {
		c.Write([]byte("control"))
		c.Close()
	}
	if !harness.WaitFor(5*time.Second, func() bool {
		return netFix.tcpHits.Load() > before[netFix.tcpHits] && netFix.udpHits.Load() > before[netFix.udpHits]
	}) {
		t.Fatalf("control: the host listeners did not count the host's own connection and datagram to %s", hostIP)
	}
	netFix.base = map[*atomic.Int64]int64{}
	for _, c := range []*atomic.Int64{netFix.tcpHits, netFix.udpHits, netFix.nsTCPHits, netFix.nsUDPHits} {
		netFix.base[c] = c.Load()
	}
	t.Logf("network targets: %s", cfg)
	runGroupEnv(t, d, a.ID, "root", networkAttempts(), map[string]string{"RT_NET": string(cfg)})
}

// vethAddrs returns the host (.1) and sandbox (.2) addresses of id's /30.
func vethAddrs(t *testing.T, id string) (host, sandbox string) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", "vse"+id[:min(12, len(id))]).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+)\.(\d+)/30`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no /30 on the veth of %s: %s", id, out)
	}
	last, _ := strconv.Atoi(m[2])
	return fmt.Sprintf("%s.%d", m[1], last), fmt.Sprintf("%s.%d", m[1], last+1)
}

// broadcastOf is the broadcast address of the /30 holding ip.
func broadcastOf(ip string) string {
	p := net.ParseIP(ip).To4()
	return fmt.Sprintf("%d.%d.%d.%d", p[0], p[1], p[2], p[3]|3)
}
