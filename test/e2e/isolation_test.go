package e2e

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// probeScript tries TCP connections in parallel from inside a sandbox and
// prints "addr result" per target; "self" is a control that must connect.
const probeScript = `
import socket, sys, threading
res = {}
def probe(a):
    s = socket.socket(); s.settimeout(2)
    try:
        if a == "self":
            l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
            s.connect(l.getsockname())
        else:
            h, p = a.rsplit(":", 1); s.connect((h, int(p)))
        res[a] = "connected"
    except ConnectionRefusedError: res[a] = "refused"
    except socket.timeout: res[a] = "timeout"
    except OSError as e: res[a] = "error:%s" % e.errno
    finally: s.close()
ts = [threading.Thread(target=probe, args=(a,)) for a in sys.argv[1:]]
[t.start() for t in ts]; [t.join() for t in ts]
for a in sys.argv[1:]: print(a, res[a])
`

// probe runs probeScript in sandbox id and returns target -> result.
func probe(t *testing.T, d *harness.Daemon, id string, targets ...string) map[string]string {
	t.Helper()
	out := sh(t, d, id, "python3 -c '"+probeScript+"' self "+strings.Join(targets, " "))
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if a, r, ok := strings.Cut(line, " "); ok {
			res[a] = r
		}
	}
	if res["self"] != "connected" {
		t.Fatalf("the probe's control connection failed: %q", out)
	}
	return res
}

// sandboxAddrs returns the host (.1) and sandbox (.2) addresses of id's /30,
// read from the host side of its veth pair.
func sandboxAddrs(t *testing.T, id string) (host, sandbox string) {
	t.Helper()
	out := hostCmd(t, "ip", "-4", "-o", "addr", "show", "dev", harness.HostIf(id))
	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+)\.(\d+)/30`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no /30 on %s: %s", harness.HostIf(id), out)
	}
	last, _ := strconv.Atoi(m[2])
	return fmt.Sprintf("%s.%d", m[1], last), fmt.Sprintf("%s.%d", m[1], last+1)
}

// countingListener accepts and counts connections until the test ends.
func countingListener(t *testing.T, ln net.Listener) *atomic.Int64 {
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

func TestIsolation(t *testing.T) {
	d := need(t)
	t.Parallel()
	a := d.NewSandbox(t, client.CreateSandboxRequest{})
	b := d.NewSandbox(t, client.CreateSandboxRequest{})

	t.Run("host files", func(t *testing.T) {
		marker := "/tmp/e2e-marker-" + harness.RandHex(8)
		if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		if got := sh(t, d, a.ID, "test -e "+marker+" && echo visible || echo hidden"); got != "hidden\n" {
			t.Errorf("host file %s is %s inside the sandbox", marker, got)
		}
		if _, err := d.Client.Stat(harness.Ctx(t, 10*time.Second), a.ID, marker); !client.IsNotFound(err) {
			t.Errorf("files API stat of the host marker: %v, want not found", err)
		}
	})

	t.Run("host processes", func(t *testing.T) {
		ps := shAs(t, d, a.ID, "root", "ps -e -o pid=,comm=")
		procs := strings.Split(strings.TrimSpace(ps), "\n")
		if strings.Contains(ps, "spaced") || strings.Contains(ps, "runsc") || len(procs) > 10 {
			t.Errorf("the sandbox sees host processes (%d):\n%s", len(procs), ps)
		}
		pids := sh(t, d, a.ID, "ls /proc | grep -c '^[0-9]'")
		if n, _ := strconv.Atoi(strings.TrimSpace(pids)); n == 0 || n > 10 {
			t.Errorf("/proc lists %s pids", pids)
		}
		t.Logf("processes inside: %q", ps)
	})

	t.Run("other sandbox files", func(t *testing.T) {
		name := "/home/user/only-in-a-" + harness.RandHex(6)
		sh(t, d, a.ID, "echo a > "+name)
		if got := sh(t, d, b.ID, "test -e "+name+" && echo visible || echo hidden"); got != "hidden\n" {
			t.Errorf("sandbox A's file is %s in sandbox B", got)
		}
		if _, err := d.Client.Stat(harness.Ctx(t, 10*time.Second), b.ID, name); !client.IsNotFound(err) {
			t.Errorf("stat of A's file through B: %v", err)
		}
	})

	t.Run("network to host and neighbours", func(t *testing.T) {
		hostIP, _ := sandboxAddrs(t, a.ID)
		_, bIP := sandboxAddrs(t, b.ID)
		_, spacedPort, _ := net.SplitHostPort(d.Addr)

		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		hits := countingListener(t, ln)
		lport := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

		// Controls from the host: the listener and B's agent are really there.
		for _, target := range []string{net.JoinHostPort(hostIP, lport), net.JoinHostPort(bIP, "49983")} {
			c, err := net.DialTimeout("tcp", target, 2*time.Second)
			if err != nil {
				t.Fatalf("control: the host cannot reach %s: %v", target, err)
			}
			c.Close()
		}
		time.Sleep(100 * time.Millisecond)
		base := hits.Load()

		targets := []string{
			net.JoinHostPort(hostIP, spacedPort),
			"127.0.0.1:" + spacedPort, // the sandbox's own loopback
			net.JoinHostPort(hostIP, lport),
			net.JoinHostPort(bIP, "49983"),
		}
		for _, ip := range hostAddrs(t) {
			targets = append(targets, net.JoinHostPort(ip, lport), net.JoinHostPort(ip, spacedPort))
		}
		res := probe(t, d, a.ID, targets...)
		t.Logf("probes from the sandbox: %v", res)
		for _, target := range targets {
			if res[target] == "connected" || res[target] == "" {
				t.Errorf("sandbox reached %s: %q", target, res[target])
			}
		}
		if r := res["127.0.0.1:"+spacedPort]; r != "refused" {
			t.Errorf("127.0.0.1:%s inside the sandbox is %q, want refused (its own loopback)", spacedPort, r)
		}
		if n := hits.Load() - base; n != 0 {
			t.Errorf("the host listener accepted %d connections from the sandbox", n)
		}
	})

	t.Run("no internet", func(t *testing.T) { testNoInternet(t, d, a.ID) })
}

// hostAddrs are the host's own IPv4 addresses (ip -4 addr), loopback and
// sandbox veths left out.
func hostAddrs(t *testing.T) []string {
	out := hostCmd(t, "ip", "-4", "-o", "addr", "show")
	var ips []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "inet" || f[1] == "lo" || strings.HasPrefix(f[1], "vse") || strings.HasPrefix(f[1], "e2e") {
			continue
		}
		ips = append(ips, strings.Split(f[3], "/")[0])
	}
	return ips
}

// testNoInternet builds a stand-in for the internet (and for a cloud
// metadata service): a network namespace of the test's own at 203.0.113.10
// and 169.254.169.254 with a listener, reachable from the host, with IP
// forwarding on. The sandbox must still reach neither.
func testNoInternet(t *testing.T, d *harness.Daemon, id string) {
	host, err := harness.NewTestHost(harness.TestHostOptions{
		Prefix: "e2e", HostAddrs: []string{"203.0.113.1/24"},
		Addrs: []string{"203.0.113.10/24", "169.254.169.254/32"}, Gateway: "203.0.113.1",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	if err := host.Route("169.254.169.254/32", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	ln, err := host.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	hits := countingListener(t, ln)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	targets := []string{net.JoinHostPort("203.0.113.10", port), net.JoinHostPort("169.254.169.254", port)}
	for _, target := range targets {
		c, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			t.Fatalf("control: the host cannot reach %s in the test namespace: %v", target, err)
		}
		c.Close()
	}

	old := strings.TrimSpace(readFileOr("/proc/sys/net/ipv4/ip_forward"))
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(old), 0o644) })

	time.Sleep(100 * time.Millisecond)
	base := hits.Load()
	res := probe(t, d, id, targets...)
	t.Logf("probes with ip_forward=1: %v", res)
	for _, target := range targets {
		if res[target] == "connected" || res[target] == "" {
			t.Errorf("sandbox reached %s: %q", target, res[target])
		}
	}
	if n := hits.Load() - base; n != 0 {
		t.Errorf("the test namespace's listener accepted %d connections from the sandbox", n)
	}
}
