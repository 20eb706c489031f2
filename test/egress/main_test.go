// Package egress tests the egress gateway end to end: a real spaced with
// real gVisor sandboxes, and a stand-in internet the tests build
// themselves: a network namespace holding TEST-NET addresses
// (198.51.100.128/25) and a few addresses in ranges of the platform floor,
// with HTTP, HTTPS, TCP and UDP servers, and a DNS server on loopback
// that the gateway uses as its upstream. No packet leaves this machine.
package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/egress"
)

// sandboxCIDR is this package's range (10.243.0.0/16 is reserved for it).
const sandboxCIDR = "10.243.0.0/24"

var env struct {
	skip    string
	tmp     string
	bin     string
	c       *client.Client
	addr    string
	apiKey  string
	logPath string
	daemon  *exec.Cmd
	net     *internet
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	runsc := envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc")
	templates := envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates")
	switch {
	case os.Geteuid() != 0:
		env.skip = "egress tests need root (they run spaced, runsc, netns and nftables)"
	case !exists(runsc):
		env.skip = "runsc not found at " + runsc + " (run scripts/install-deps.sh or set SPACE_RUNSC)"
	case !exists(filepath.Join(templates, "base", "current", "usr/local/bin/space-agent")):
		env.skip = "base template not found in " + templates + " (run scripts/build-template.sh)"
	}
	if env.skip != "" {
		fmt.Fprintln(os.Stderr, "egress: skipping:", env.skip)
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "space-egress-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "egress:", err)
		return 1
	}
	env.tmp = tmp
	code := func() int {
		if err := setup(runsc, templates); err != nil {
			fmt.Fprintln(os.Stderr, "egress: setup:", err)
			fmt.Fprintln(os.Stderr, logTail(60))
			return 1
		}
		return m.Run()
	}()
	teardown()
	if code == 0 {
		os.RemoveAll(tmp)
	} else {
		fmt.Fprintln(os.Stderr, "egress: logs kept in", tmp)
	}
	return code
}

// setup builds spaced and the agent, makes a private copy of the base
// template with the fresh agent, builds the stand-in internet and starts
// spaced with the test DNS server as its upstream.
func setup(runsc, templates string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	repo := filepath.Dir(strings.TrimSpace(string(out)))
	env.bin = filepath.Join(env.tmp, "bin")
	for _, s := range [][]string{
		{"go", "build", "-o", filepath.Join(env.bin, "spaced"), "./cmd/spaced"},
		{"go", "build", "-o", filepath.Join(env.bin, "space-agent"), "./cmd/space-agent"},
	} {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	// A template of our own: the shared one may hold another branch's agent.
	tdir := filepath.Join(env.tmp, "templates", "base")
	rootfs := filepath.Join(tdir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return err
	}
	src, err := filepath.EvalSymlinks(filepath.Join(templates, "base", "current"))
	if err != nil {
		return err
	}
	for _, s := range [][]string{
		{"cp", "-a", "--reflink=auto", src + "/.", rootfs},
		{"install", "-m", "0755", filepath.Join(env.bin, "space-agent"), filepath.Join(rootfs, "usr/local/bin/space-agent")},
		{"ln", "-s", "rootfs", filepath.Join(tdir, "current")},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	if env.net, err = newInternet(); err != nil {
		return err
	}
	upstreamCA := filepath.Join(env.tmp, "upstream-ca.pem")
	if err := os.WriteFile(upstreamCA, env.net.caPEM, 0o644); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	env.addr = fmt.Sprintf("127.0.0.1:%d", port)
	env.apiKey = "egress_" + randHex(16)
	env.logPath = filepath.Join(env.tmp, "spaced.log")
	logf, err := os.Create(env.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(env.bin, "spaced"))
	cmd.Env = append(os.Environ(),
		"SPACE_DATA_DIR="+filepath.Join(env.tmp, "data"),
		"SPACE_TEMPLATES_DIR="+filepath.Join(env.tmp, "templates"),
		"SPACE_RUNSC="+runsc,
		"SPACE_API_KEY="+env.apiKey,
		"SPACE_ADDR="+env.addr,
		"SPACE_SANDBOX_CIDR="+sandboxCIDR,
		"SPACE_POOL=",
		"SPACE_LOG_LEVEL=debug",
		"SPACE_EGRESS_DNS="+env.net.dnsAddr,
		"SPACE_EGRESS_UPSTREAM_CA="+upstreamCA,
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	env.daemon = cmd
	env.c = client.New(env.addr, env.apiKey)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + env.addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
	}
	return fmt.Errorf("spaced did not answer /healthz within 30s")
}

// teardown kills the sandboxes, stops spaced, and removes the daemon's
// firewall table and the stand-in internet.
func teardown() {
	if env.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if sbs, err := env.c.ListAllSandboxes(ctx, client.ListOptions{States: []string{"creating", "running"}}); err == nil {
			for _, sb := range sbs {
				env.c.KillSandbox(ctx, sb.ID)
			}
		}
		cancel()
	}
	if env.daemon != nil {
		env.daemon.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { env.daemon.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			env.daemon.Process.Kill()
			<-done
		}
		for syscall.Unmount(filepath.Join(env.tmp, "data", "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
		}
	}
	egress.RemoveRules(netip.MustParsePrefix(sandboxCIDR))
	if env.net != nil {
		env.net.close()
	}
}

func need(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("spaced log tail:\n" + logTail(40))
		}
	})
}

func logTail(n int) string {
	data, _ := os.ReadFile(env.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
