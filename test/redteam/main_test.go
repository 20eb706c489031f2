// Package redteam runs hostile code inside real gVisor sandboxes under a
// real spaced and checks that every attempt to escape or to harm the host,
// spaced or a neighbouring sandbox fails. Each attempt is one entry of a
// table (id, category, what it tries, the code, and the check of its
// result); docs/security.md lists every id with what stops it, and a test
// keeps the two in step. The package skips itself where it cannot run (not
// root, no runsc, no base template).
package redteam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/spacesandbox/space/internal/egress"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// env is what TestMain prepared for every test.
var env struct {
	skip         string // why the package cannot run, or ""
	repo         string
	bin          string
	templatesDir string
	runsc        string
	tmp          string
	d            *daemon
	canary       *canary
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	env.runsc = envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc")
	env.templatesDir = envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates")
	switch {
	case os.Geteuid() != 0:
		env.skip = "red-team tests need root (they run spaced, runsc, netns and nftables)"
	case !exists(env.runsc):
		env.skip = fmt.Sprintf("runsc not found at %s (run scripts/install-deps.sh or set SPACE_RUNSC)", env.runsc)
	case !exists(filepath.Join(env.templatesDir, "base", "current")):
		env.skip = fmt.Sprintf("base template not found at %s/base/current (run scripts/build-template.sh or set SPACE_TEMPLATES_DIR)", env.templatesDir)
	}
	if env.skip != "" {
		fmt.Fprintln(os.Stderr, "redteam: skipping:", env.skip)
		return m.Run()
	}
	// spaced starts with the first test that needs it (need), so that
	// TestSecurityDoc alone builds and starts nothing.
	code := m.Run()
	if env.d != nil {
		env.d.shutdown()
	}
	if env.canary != nil {
		if err := env.canary.check(); err != nil {
			fmt.Fprintln(os.Stderr, "redteam: host canaries after the run:", err)
			code = 1
		}
		env.canary.remove()
	}
	if env.tmp != "" {
		if code == 0 {
			os.RemoveAll(env.tmp)
		} else {
			fmt.Fprintln(os.Stderr, "redteam: logs kept in", env.tmp)
		}
	}
	return code
}

var (
	startOnce sync.Once
	startErr  error
)

// start builds the binaries, starts spaced and lays the host canaries.
func start() error {
	tmp, err := os.MkdirTemp("", "space-redteam-")
	if err != nil {
		return err
	}
	env.tmp = tmp
	if err := build(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	d, err := startDaemon("main", "10.245.0.0/20")
	if d != nil {
		env.d = d
	}
	if err != nil {
		if d != nil {
			return fmt.Errorf("start spaced: %w\n%s", err, d.logTail(40))
		}
		return fmt.Errorf("start spaced: %w", err)
	}
	if env.canary, err = newCanary(d); err != nil {
		return fmt.Errorf("canary: %w", err)
	}
	return nil
}

// build compiles spaced and the agent and installs the fresh agent into the
// base template (a quick no-op when the rootfs is cached).
func build() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	env.repo = filepath.Dir(strings.TrimSpace(string(out)))
	env.bin = filepath.Join(env.tmp, "bin")
	steps := [][]string{
		{"go", "build", "-o", filepath.Join(env.bin, "spaced"), "./cmd/spaced"},
		{"go", "build", "-o", filepath.Join(env.bin, "space-agent"), "./cmd/space-agent"},
		{"scripts/build-template.sh", "--out", env.templatesDir, "--agent", filepath.Join(env.bin, "space-agent")},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = env.repo
		cmd.Env = os.Environ()
		if strings.HasSuffix(s[len(s)-1], "space-agent") {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// need skips t when the package cannot run, and returns the daemon.
func need(t *testing.T) *daemon {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	startOnce.Do(func() { startErr = start() })
	if startErr != nil {
		t.Fatalf("redteam: %v", startErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(env.d.logTail(60))
		}
	})
	return env.d
}

// daemon is the spaced under attack.
type daemon struct {
	cidr    string
	dataDir string
	addr    string
	apiKey  string
	logPath string
	c       *client.Client
	cmd     *exec.Cmd
	done    chan struct{}
}

func startDaemon(name, cidr string) (*daemon, error) {
	dir, err := os.MkdirTemp(env.tmp, name+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{
		cidr:    cidr,
		dataDir: filepath.Join(dir, "data"),
		addr:    fmt.Sprintf("127.0.0.1:%d", port),
		apiKey:  "rt_" + randHex(16),
		logPath: filepath.Join(dir, "spaced.log"),
	}
	d.c = client.New(d.addr, d.apiKey)
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(env.bin, "spaced"))
	cmd.Env = append(os.Environ(),
		"SPACE_DATA_DIR="+d.dataDir,
		"SPACE_TEMPLATES_DIR="+env.templatesDir,
		"SPACE_RUNSC="+env.runsc,
		"SPACE_API_KEY="+d.apiKey,
		"SPACE_ADDR="+d.addr,
		"SPACE_SANDBOX_CIDR="+cidr,
		"SPACE_AGENT_BOOT_TIMEOUT=10s",
		"SPACE_POOL=base=2:4",
		"SPACE_LOG_LEVEL=info",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return d, fmt.Errorf("spaced exited at start: %s", cmd.ProcessState)
		default:
		}
		if d.healthy() {
			return d, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d, fmt.Errorf("spaced did not answer /healthz within 30s")
}

func (d *daemon) healthy() bool { return d.healthyWithin(5*time.Second) == nil }

// healthyWithin checks that /healthz answers 200 within limit.
func (d *daemon) healthyWithin(limit time.Duration) error {
	hc := &http.Client{Timeout: limit}
	resp, err := hc.Get("http://" + d.addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: status %d", resp.StatusCode)
	}
	return nil
}

// pid is spaced's host pid.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// shutdown kills every sandbox, stops spaced and unmounts runsc's netns.
func (d *daemon) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sbs, err := d.c.ListAllSandboxes(ctx, client.ListOptions{States: []string{"creating", "running"}}); err == nil {
		var wg sync.WaitGroup
		for _, sb := range sbs {
			wg.Add(1)
			go func() { defer wg.Done(); d.c.KillSandbox(ctx, sb.ID) }()
		}
		wg.Wait()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
	for syscall.Unmount(filepath.Join(d.dataDir, "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
	}
	// spaced keeps its egress firewall table when it stops (its sandboxes
	// may outlive it); this daemon is gone for good.
	if p, err := netip.ParsePrefix(d.cidr); err == nil {
		egress.RemoveRules(p)
	}
}

func (d *daemon) logTail(n int) string {
	data, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), d.logPath, strings.Join(lines, "\n"))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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
	_, err := os.Lstat(p)
	return err == nil
}
