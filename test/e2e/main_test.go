// Package e2e runs the real spaced, with real gVisor sandboxes and the real
// in-sandbox agent, and checks what a user of the public API sees and what
// is left on the host. Nothing here is faked; the package skips itself
// where it cannot run (not root, no runsc, no base template).
package e2e

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/egress"
)

// env is what TestMain prepared for every test.
var env struct {
	skip         string // why the package cannot run, or ""
	repo         string
	bin          string // dir with spaced, space-agent, space
	templatesDir string
	runsc        string
	tmp          string
	main         *daemon // shared by tests that do not restart it
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	env.runsc = envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc")
	env.templatesDir = envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates")
	switch {
	case os.Geteuid() != 0:
		env.skip = "e2e tests need root (they run spaced, runsc, netns and nftables)"
	case !exists(env.runsc):
		env.skip = fmt.Sprintf("runsc not found at %s (run scripts/install-deps.sh or set SPACE_RUNSC)", env.runsc)
	case !exists(filepath.Join(env.templatesDir, "base", "current")):
		env.skip = fmt.Sprintf("base template not found at %s/base/current (run scripts/build-template.sh or set SPACE_TEMPLATES_DIR)", env.templatesDir)
	}
	if env.skip != "" {
		fmt.Fprintln(os.Stderr, "e2e: skipping:", env.skip)
		return m.Run() // every test skips with the reason
	}
	tmp, err := os.MkdirTemp("", "space-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env.tmp = tmp
	if err := build(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build:", err)
		return 1
	}
	d, err := startDaemon(daemonOptions{name: "main", cidr: "10.241.0.0/20"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start spaced:", err)
		if d != nil {
			fmt.Fprintln(os.Stderr, d.logTail(40))
		}
		return 1
	}
	env.main = d
	code := m.Run()
	d.shutdown()
	if code == 0 {
		os.RemoveAll(tmp)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: logs kept in", tmp)
	}
	return code
}

// build compiles the binaries under test and installs the fresh agent into
// the base template (a quick no-op when the rootfs is cached).
func build() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	env.repo = filepath.Dir(strings.TrimSpace(string(out)))
	env.bin = filepath.Join(env.tmp, "bin")
	steps := [][]string{
		{"go", "build", "-o", filepath.Join(env.bin, "spaced"), "./cmd/spaced"},
		{"go", "build", "-o", filepath.Join(env.bin, "space"), "./cmd/space"},
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

// need skips t when the package cannot run, and returns the shared daemon.
// On failure the tail of its log is printed.
func need(t *testing.T) *daemon {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	env.main.dumpOnFailure(t)
	return env.main
}

type daemonOptions struct {
	name         string
	cidr         string
	templatesDir string                     // default env.templatesDir
	bootTimeout  time.Duration              // default 5s
	noPool       bool                       // SPACE_POOL="": no warm sandboxes, so the host holds only what the API lists
	pool         string                     // SPACE_POOL, when set (e.g. "base=4:4")
	env          []string                   // more environment, e.g. the object store
	prepare      func(dataDir string) error // runs before the first start
}

var (
	daemonsMu sync.Mutex
	daemons   []*daemon // every daemon started, for telling whose a netns is
)

// daemon is one spaced process (and its successors on the same data dir).
type daemon struct {
	opts    daemonOptions
	dataDir string
	addr    string
	apiKey  string
	logPath string
	c       *client.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startDaemon(o daemonOptions) (*daemon, error) {
	if o.templatesDir == "" {
		o.templatesDir = env.templatesDir
	}
	if o.bootTimeout == 0 {
		o.bootTimeout = 5 * time.Second
	}
	dir, err := os.MkdirTemp(env.tmp, o.name+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &daemon{
		opts:    o,
		dataDir: filepath.Join(dir, "data"),
		addr:    fmt.Sprintf("127.0.0.1:%d", port),
		apiKey:  "e2e_" + randHex(16),
		logPath: filepath.Join(dir, "spaced.log"),
	}
	d.c = client.New(d.addr, d.apiKey)
	daemonsMu.Lock()
	daemons = append(daemons, d)
	daemonsMu.Unlock()
	if o.prepare != nil {
		if err := o.prepare(d.dataDir); err != nil {
			return d, err
		}
	}
	return d, d.start()
}

// start runs spaced on the daemon's data dir and waits for /healthz.
func (d *daemon) start() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "===== e2e: starting spaced at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(filepath.Join(env.bin, "spaced"))
	cmd.Env = append(os.Environ(),
		"SPACE_DATA_DIR="+d.dataDir,
		"SPACE_TEMPLATES_DIR="+d.opts.templatesDir,
		"SPACE_RUNSC="+env.runsc,
		"SPACE_API_KEY="+d.apiKey,
		"SPACE_ADDR="+d.addr,
		"SPACE_SANDBOX_CIDR="+d.opts.cidr,
		"SPACE_AGENT_BOOT_TIMEOUT="+d.opts.bootTimeout.String(),
		"SPACE_LOG_LEVEL=debug",
	)
	cmd.Env = append(cmd.Env, d.opts.env...)
	if d.opts.noPool {
		cmd.Env = append(cmd.Env, "SPACE_POOL=")
	} else if d.opts.pool != "" {
		cmd.Env = append(cmd.Env, "SPACE_POOL="+d.opts.pool)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("spaced exited at start: %s", cmd.ProcessState)
		default:
		}
		if d.healthy() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.kill9()
	return fmt.Errorf("spaced did not answer /healthz within 30s")
}

func (d *daemon) healthy() bool {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + d.addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop sends SIGTERM and waits for spaced to exit.
func (d *daemon) stop() error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("spaced did not exit within 20s of SIGTERM")
	}
	if st := cmd.ProcessState; !st.Success() {
		return fmt.Errorf("spaced exited with %s after SIGTERM", st)
	}
	return nil
}

// kill9 kills spaced with SIGKILL (its sandboxes are not its children).
func (d *daemon) kill9() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// shutdown kills every sandbox this daemon still runs, then stops it.
func (d *daemon) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sbs, err := d.c.ListAllSandboxes(ctx, client.ListOptions{States: []string{"creating", "running"}}); err == nil {
		for _, sb := range sbs {
			d.c.KillSandbox(ctx, sb.ID)
		}
	}
	if err := d.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}
	// runsc mounts a namespace at <root>/null-netns (sometimes twice); it
	// outlives spaced and would keep the data dir from being removed.
	for syscall.Unmount(filepath.Join(d.dataDir, "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
	}
	// spaced keeps its egress firewall table when it stops (its sandboxes
	// may outlive it); this daemon is gone for good.
	if p, err := netip.ParsePrefix(d.opts.cidr); err == nil {
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

func (d *daemon) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logTail(60))
		}
	})
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
