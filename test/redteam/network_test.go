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
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// noneConnected: no probe in R['res'] connected or was answered.
func noneConnected(r res) error {
	m, ok := r["res"].(map[string]any)
	if !ok || len(m) == 0 {
		return fmt.Errorf("no probe results: %v", r)
	}
	for target, v := range m {
		if s, _ := v.(string); s == "connected" || s == "answered" || s == "reply" {
			return fmt.Errorf("reached %s (%s)", target, s)
		}
	}
	return nil
}

// hostUnreached: on top of noneConnected, none of the host-side listeners
// counted anything.
func hostUnreached(r res) error {
	if err := noneConnected(r); err != nil {
		return err
	}
	return listenersQuiet()
}

// listenersQuiet: none of the host-side listeners counted anything.
func listenersQuiet() error {
	for name, n := range map[string]*atomic.Int64{"host TCP": netFix.tcpHits, "host UDP": netFix.udpHits, "test namespace TCP": netFix.nsTCPHits, "test namespace UDP": netFix.nsUDPHits} {
		if v := n.Load() - netFix.base[n]; v != 0 {
			return fmt.Errorf("the %s listener received %d connections or packets from the sandbox", name, v)
		}
	}
	return nil
}

// dnsProbe asks for example.com at port 53 of three addresses, over UDP
// and TCP, and records each answer's rcode and answer count.
const dnsProbe = `q = struct.pack('!HHHHHH', 1, 0x100, 1, 0, 0, 0) + b'\x07example\x03com\x00\x00\x01\x00\x01'
R['res'] = {}
for a in (NET['host'], '169.254.169.254', '198.51.100.10'):
    for proto in ('udp', 'tcp'):
        k = proto + ':' + a
        try:
            if proto == 'udp':
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1); s.sendto(q, (a, 53)); resp = s.recvfrom(512)[0]
            else:
                s = socket.create_connection((a, 53), timeout=1); s.sendall(struct.pack('!H', len(q)) + q); resp = s.recv(514)[2:]
            s.close()
            R['res'][k] = 'rcode=%d an=%d' % (resp[3] & 15, struct.unpack('!H', resp[6:8])[0])
        except OSError as e:
            R['res'][k] = 'error:' + en(e.errno or 0)
`

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

func tcpTo(expr string) string { return "R['res'] = probe_tcp(" + expr + ")" }

func networkAttempts() []attempt {
	return []attempt{
		{id: "net-host-spaced", desc: "TCP to spaced's port on the host end of the sandbox's veth", stops: nft,
			py: tcpTo("[NET['host'] + ':' + NET['spaced']]"), check: hostUnreached},
		{id: "net-host-listener", desc: "TCP to a host listener on 0.0.0.0 through the veth's host address", stops: nft,
			py: tcpTo("[NET['host'] + ':' + NET['tcp']]"), check: hostUnreached},
		{id: "net-host-ports", desc: "TCP to well-known host ports (ssh, http, docker, etcd, kubelet, the agent's port) on the veth's host address (53 is the egress gateway's DNS: net-udp-dns)", stops: nft,
			py: tcpTo("[NET['host'] + ':' + str(p) for p in (22, 80, 111, 443, 2375, 2379, 6443, 10250, 49983)]"), check: hostUnreached},
		{id: "net-host-other-ifaces", desc: "TCP to the host's other interface addresses (spaced's port and a listener)", stops: nft,
			py: tcpTo("[a + ':' + p for a in NET['hostAddrs'] for p in (NET['spaced'], NET['tcp'])]"), check: hostUnreached},
		{id: "net-host-loopback", desc: "127.0.0.1 and localhost at spaced's port (the host's loopback)", stops: netstack + ": 127.0.0.1 is the sandbox's own loopback",
			py:    tcpTo("['127.0.0.1:' + NET['spaced'], '127.0.0.2:' + NET['spaced'], 'localhost:' + NET['tcp']]") + "\nR['own'] = [v for v in R['res'].values()]",
			check: hostUnreached},
		{id: "net-neighbour-agent", desc: "TCP to the neighbour sandbox's agent port", stops: nft,
			py: tcpTo("[NET['neighbour'] + ':49983']"), check: noneConnected},
		{id: "net-neighbour-ports", desc: "TCP to a server the neighbour runs and to common ports of the neighbour", stops: nft,
			py: tcpTo("[NET['neighbour'] + ':' + str(p) for p in (8000, 22, 80, 443, 8080)]"), check: noneConnected},
		{id: "net-other-slots", desc: "TCP to the agent port of every address in the first sandbox slots (other sandboxes, present or future)", stops: nft,
			py: tcpTo("['10.245.0.%d:49983' % i for i in range(1, 64) if '10.245.0.%d' % i != NET['self']]"), check: noneConnected},
		{id: "net-metadata", desc: "TCP to 169.254.169.254 (cloud metadata), given to a host in a test namespace", stops: nft,
			py: tcpTo("['169.254.169.254:' + NET['ns'], '169.254.169.254:80']"), check: hostUnreached},
		{id: "net-cgnat", desc: "TCP to 100.64.0.1 (shared address space), given to a host in a test namespace", stops: nft,
			py: tcpTo("['100.64.0.1:' + NET['ns']]"), check: hostUnreached},
		{id: "net-internet", desc: "TCP to a stand-in for the internet (198.51.100.10) behind the host, with IP forwarding on", stops: nft,
			py: tcpTo("['198.51.100.10:' + NET['ns'], '198.51.100.10:80']"), check: hostUnreached},
		{id: "net-ipv6", desc: "IPv6: the host's link-local and global addresses, the test namespace's 2001:db8:245::10, and ::1 at spaced's port", stops: netstack + " (no IPv6 route out); " + nft,
			py: tcpTo("['[' + a + ']:' + NET['tcp'] for a in NET['hostAddrs6']] + ['[2001:db8:245::10]:' + NET['ns'], '[::1]:' + NET['spaced']]"), check: hostUnreached},
		{id: "net-icmp", desc: "ICMP echo (unprivileged ICMP sockets) to the host, the neighbour, the metadata address and the internet stand-in", stops: nft + "; " + netstack,
			py: "R['res'] = ping([NET['host'], NET['neighbour'], '169.254.169.254', '198.51.100.10'] + NET['hostAddrs'])", check: noneConnected},
		{id: "net-udp-host", desc: "UDP to a host listener through the veth address and every host address, and broadcast", stops: nft,
			py: "R['res'] = send_udp([a + ':' + NET['udp'] for a in [NET['host']] + NET['hostAddrs']] + ['255.255.255.255:' + NET['udp'], NET['bcast'] + ':' + NET['udp']])", check: hostUnreached},
		{id: "net-udp-dns", desc: "DNS queries over UDP and TCP to the host, 169.254.169.254 and the internet stand-in, from a sandbox whose policy allows nothing", stops: nft + "; the egress gateway's DNS server takes every query to port 53 and answers only names the policy allows",
			py: dnsProbe, check: dnsRefused},
		{id: "net-udp-namespace", desc: "UDP to listeners on 169.254.169.254, 100.64.0.1 and the internet stand-in", stops: nft,
			py: "R['res'] = send_udp([a + ':' + NET['nsudp'] for a in ('169.254.169.254', '100.64.0.1', '198.51.100.10')])", check: hostUnreached},
		{id: "net-udp-neighbour", desc: "UDP to the neighbour's address", stops: nft,
			py: "R['res'] = send_udp([NET['neighbour'] + ':' + p for p in ('53', '49983', '8000')])", check: noneConnected},
		{id: "net-spoof-source", desc: "bind to the neighbour's address, the host's and 169.254.169.254 as a source (IP spoofing)", stops: netstack + ": only the sandbox's own address can be bound",
			py: "R['errs'] = {}\nfor a in (NET['neighbour'], NET['host'], '169.254.169.254'):\n    s = socket.socket(); R['errs'][a] = tryio(s.bind, (a, 0))[1]; s.close()", check: allFailed("errs")},
		{id: "net-ip-transparent", desc: "IP_TRANSPARENT and IP_FREEBIND, then bind to the neighbour's address; SO_BINDTODEVICE", stops: noCap + " (CAP_NET_ADMIN, CAP_NET_RAW)",
			py: "R['errs'] = {}\nfor n, opt in (('transparent', 19), ('freebind', 15)):\n    s = socket.socket()\n    R['errs'][n] = tryio(s.setsockopt, socket.SOL_IP, opt, 1)[1] or tryio(s.bind, (NET['neighbour'], 0))[1]\n    s.close()\ns = socket.socket()\nR['errs']['bindtodevice-lo'] = tryio(s.setsockopt, socket.SOL_SOCKET, 25, b'lo') [1] or (probe_tcp([NET['host'] + ':' + NET['tcp']], 1).popitem()[1] != 'connected' and 'unreached') or ''", check: allFailed("errs")},
		{id: "net-route-table", desc: "read the routing and neighbour tables for other sandboxes and host networks", stops: netstack + ": one interface, one default route",
			py:    "R['routes'] = readf('/proc/net/route') + readf('/proc/net/arp')\nR['other'] = [l for l in R['routes'].splitlines()[1:] if l.split() and l.split()[0] not in ('eth0', 'lo', 'IP')]",
			check: emptyList("other")},
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

// testNamespace makes a network namespace of the test's own, held by a
// process (not `ip netns add`, which would remount /var/run/netns under
// spaced), reachable from the host, holding 198.51.100.10 (an internet
// stand-in), 169.254.169.254, 100.64.0.1 and 2001:db8:245::10. It returns
// the namespace's path.
func testNamespace(t *testing.T) string {
	suffix := harness.RandHex(3)
	hostEnd, nsEnd := "rth"+suffix, "rtn"+suffix
	holder := exec.Command("unshare", "--net", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	pid := strconv.Itoa(holder.Process.Pid)
	nsPath := "/proc/" + pid + "/ns/net"
	if !harness.WaitFor(5*time.Second, func() bool {
		self, _ := os.Readlink("/proc/self/ns/net")
		other, _ := os.Readlink(nsPath)
		return other != "" && other != self
	}) {
		t.Fatal("unshare --net did not make a namespace")
	}
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostEnd).Run() })
	in := func(args ...string) []string { return append([]string{"nsenter", "-t", pid, "-n", "ip"}, args...) }
	for _, args := range [][]string{
		{"ip", "link", "set", nsEnd, "netns", pid},
		{"ip", "addr", "add", "198.51.100.1/24", "dev", hostEnd},
		{"ip", "-6", "addr", "add", "2001:db8:245::1/64", "dev", hostEnd, "nodad"},
		{"ip", "link", "set", hostEnd, "up"},
		in("addr", "add", "198.51.100.10/24", "dev", nsEnd),
		in("addr", "add", "169.254.169.254/32", "dev", nsEnd),
		in("addr", "add", "100.64.0.1/32", "dev", nsEnd),
		in("-6", "addr", "add", "2001:db8:245::10/64", "dev", nsEnd, "nodad"),
		in("link", "set", nsEnd, "up"),
		in("link", "set", "lo", "up"),
		in("route", "add", "default", "via", "198.51.100.1"),
	} {
		run(args...)
	}
	// Another test (test/e2e) may hold a route to one of these for a while.
	for _, dst := range []string{"169.254.169.254/32", "100.64.0.1/32"} {
		var out []byte
		if !harness.WaitFor(60*time.Second, func() bool {
			var err error
			out, err = exec.Command("ip", "route", "add", dst, "dev", hostEnd).CombinedOutput()
			return err == nil
		}) {
			t.Fatalf("ip route add %s dev %s: %s", dst, hostEnd, out)
		}
	}
	return nsPath
}

// inNetns runs fn on a thread that joined the namespace at nsPath; the
// thread is thrown away afterwards (it stays locked).
func inNetns(t *testing.T, nsPath string, fn func() error) {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(nsPath)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("in %s: %v", nsPath, err)
	}
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

	nsPath := testNamespace(t)
	var nsLn net.Listener
	var nsPC net.PacketConn
	inNetns(t, nsPath, func() (err error) {
		if nsLn, err = net.Listen("tcp", ":0"); err != nil {
			return err
		}
		nsPC, err = net.ListenPacket("udp", ":0")
		return err
	})
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
