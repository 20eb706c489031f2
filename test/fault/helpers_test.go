package fault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spacesandbox/space/internal/egress"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/store"
)

type daemonOptions struct {
	name    string
	cidr    string // inside 10.246.0.0/16
	pool    string // SPACE_POOL ("" turns pooling off)
	dataDir string // default: a fresh directory under env.tmp
}

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

// ownDaemon starts a spaced for the test; when the test ends it kills every
// sandbox the daemon still has and stops it.
func ownDaemon(t *testing.T, o daemonOptions) *daemon {
	t.Helper()
	need(t)
	dir, err := os.MkdirTemp(env.tmp, o.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		opts: o, dataDir: o.dataDir, addr: fmt.Sprintf("127.0.0.1:%d", port),
		apiKey: "fault_" + randHex(16), logPath: filepath.Join(dir, "spaced.log"),
	}
	if d.dataDir == "" {
		d.dataDir = filepath.Join(dir, "data")
	}
	d.c = client.New(d.addr, d.apiKey)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logTail(60))
		}
	})
	if err := d.start(); err != nil {
		t.Fatalf("start spaced %s: %v", o.name, err)
	}
	t.Cleanup(func() {
		if !d.healthy() {
			d.start() // so the sandboxes it left can be killed
		}
		d.shutdown()
	})
	return d
}

// start runs spaced on the daemon's data dir and waits for /healthz.
func (d *daemon) start() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "===== fault: starting spaced at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(filepath.Join(env.bin, "spaced"))
	cmd.Env = append(os.Environ(),
		"SPACE_DATA_DIR="+d.dataDir,
		"SPACE_TEMPLATES_DIR="+env.templatesDir,
		"SPACE_RUNSC="+env.runsc,
		"SPACE_API_KEY="+d.apiKey,
		"SPACE_ADDR="+d.addr,
		"SPACE_SANDBOX_CIDR="+d.opts.cidr,
		"SPACE_AGENT_BOOT_TIMEOUT=10s",
		"SPACE_LOG_LEVEL=debug",
		"SPACE_POOL="+d.opts.pool,
		"SPACE_POOL_BOOTS=2",
	)
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
	deadline := time.Now().Add(60 * time.Second)
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
	return fmt.Errorf("spaced did not answer /healthz within 60s")
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

// pid is the running spaced's process id.
func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid
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

// stop sends SIGTERM and waits for spaced to exit.
func (d *daemon) stop() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// shutdown kills every sandbox this daemon still runs, then stops it; a
// pool's sandboxes go with the stop.
func (d *daemon) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sbs, err := d.c.ListAllSandboxes(ctx, client.ListOptions{States: []string{"creating", "running"}}); err == nil {
		for _, sb := range sbs {
			d.c.KillSandbox(ctx, sb.ID)
		}
	}
	d.stop()
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

// records reads every sandbox record from the store of a stopped daemon:
// the ids of everything it had begun, half-made creates included.
func (d *daemon) records(t *testing.T) []*store.Sandbox {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(d.dataDir, "state.db"))
	if err != nil {
		t.Fatalf("open the store of the stopped daemon: %v", err)
	}
	defer st.Close()
	recs, err := st.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// hostLeftovers lists what sandbox id still has on the host.
func hostLeftovers(d *daemon, id string) []string {
	var left []string
	check := func(what, p string) {
		if exists(p) {
			left = append(left, what+" "+p)
		}
	}
	states, _ := filepath.Glob(filepath.Join(d.dataDir, "runsc", id+"*"))
	for _, s := range states {
		left = append(left, "runsc state "+s)
	}
	check("bundle dir", filepath.Join(d.dataDir, "sandboxes", id))
	check("netns", "/var/run/netns/space-"+id)
	check("veth", "/sys/class/net/vse"+id[:min(12, len(id))])
	cg, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "space", id))
	for _, c := range cg {
		left = append(left, "cgroup "+c)
	}
	check("cgroup", filepath.Join("/sys/fs/cgroup", "space", id))
	for _, p := range runscProcs(id) {
		left = append(left, fmt.Sprintf("process %d %s", p.pid, p.name))
	}
	return left
}

// runscProc is a host process of one sandbox (runsc-sandbox, runsc-gofer).
type runscProc struct {
	pid  int
	name string
}

// runscProcs finds the runsc processes whose command line ends with the
// sandbox id (runsc's container id is the sandbox id).
func runscProcs(id string) []runscProc {
	var out []runscProc
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || !strings.HasPrefix(args[0], "runsc") || args[len(args)-1] != id {
			continue
		}
		out = append(out, runscProc{pid: pid, name: args[0]})
	}
	return out
}

// sandboxPid reads the sandbox process's pid from runsc's state file.
func sandboxPid(t *testing.T, d *daemon, id string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.dataDir, "runsc", id+"_sandbox:"+id+".state"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Sandbox struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st.Sandbox.Pid
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it is true or the timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs cmd in the sandbox and returns its stdout, failing the test
// unless it exits 0.
func run(t *testing.T, d *daemon, id, cmd string) string {
	t.Helper()
	out, err := tryRun(ctxT(t, time.Minute), d, id, cmd)
	if err != nil {
		t.Fatalf("%q in %s: %v", cmd, id, err)
	}
	return out
}

func tryRun(ctx context.Context, d *daemon, id, cmd string) (string, error) {
	s, err := d.c.RunCommand(ctx, id, client.CommandRequest{Cmd: cmd})
	if err != nil {
		return "", err
	}
	defer s.Close()
	var out strings.Builder
	for {
		ev, err := s.Next()
		if err != nil {
			return out.String(), err
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventEnd:
			if ev.Exit.Code() != 0 {
				return out.String(), fmt.Errorf("exit %d", ev.Exit.Code())
			}
			return out.String(), nil
		}
	}
}

// wantAPIError checks that err is an API error with one of the statuses
// and a message: what a client of a broken sandbox must get.
func wantAPIError(t *testing.T, what string, err error, statuses ...int) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Errorf("%s: %v, want an API error", what, err)
		return
	}
	for _, s := range statuses {
		if apiErr.Status == s && apiErr.Message != "" && !strings.HasPrefix(apiErr.Code, "http_") {
			return
		}
	}
	t.Errorf("%s: %d %s %q, want one of %v with a JSON error body", what, apiErr.Status, apiErr.Code, apiErr.Message, statuses)
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
