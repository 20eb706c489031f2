package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	"github.com/spacesandbox/space/internal/testenv"
)

// Options configure one spaced.
type Options struct {
	// Name names the daemon's directory under the suite's temp dir.
	Name string
	// CIDR is SPACE_SANDBOX_CIDR. Every daemon needs a range of its own:
	// test packages run in parallel, and each suite keeps to its block.
	CIDR string
	// DataDir defaults to a fresh directory under the suite's temp dir.
	DataDir string
	// TemplatesDir defaults to SPACE_TEMPLATES_DIR's.
	TemplatesDir string
	// BootTimeout is SPACE_AGENT_BOOT_TIMEOUT; 0 leaves spaced's default.
	BootTimeout time.Duration
	// StartTimeout bounds the wait for /healthz at each start (30 s if 0):
	// a restart recovers every sandbox the daemon had first.
	StartTimeout time.Duration
	// Pool is SPACE_POOL (e.g. "base=4:8"); "" leaves spaced's default.
	Pool string
	// NoPool sets SPACE_POOL="": no warm sandboxes, so the host holds only
	// what the API lists.
	NoPool bool
	// Env is more environment, applied last, so it may override the
	// above (SPACE_LOG_LEVEL is debug unless it does).
	Env []string
	// Prepare runs on the data dir before the first start (a small
	// filesystem mounted under it, for example).
	Prepare func(dataDir string) error
	// APIKey is the admin key (default: a fresh one): the nodes of a
	// cluster share theirs.
	APIKey string
	// Catalog, when set, makes the daemon a cluster node on this
	// PostgreSQL database: its node id is Name, its address its own API
	// address, its lease Lease (spaced's default if 0).
	Catalog string
	Lease   time.Duration
}

// Daemon is one spaced process, and its successors on the same data dir,
// address and key after a Restart.
type Daemon struct {
	Opts    Options // Restart reads them again
	DataDir string
	Addr    string // host:port of the API
	APIKey  string
	LogPath string // spaced's stdout and stderr, every start appended
	Client  *client.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// daemons are all the daemons this test binary started, for telling whose
// a network namespace or link is.
var daemons struct {
	mu  sync.Mutex
	all []*Daemon
}

// Daemons returns every daemon started so far.
func Daemons() []*Daemon {
	daemons.mu.Lock()
	defer daemons.mu.Unlock()
	return append([]*Daemon(nil), daemons.all...)
}

// Start builds the binaries if need be and starts a spaced, waiting for
// /healthz. On an error the daemon is returned too when there is one, for
// its log.
func Start(o Options) (*Daemon, error) {
	bin, err := Build()
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if o.TemplatesDir == "" {
		o.TemplatesDir = testenv.TemplatesDir()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	if err := lockCIDR(o.CIDR); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(suite.tmp, o.Name+"-")
	if err != nil {
		return nil, err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		Opts:    o,
		DataDir: o.DataDir,
		Addr:    fmt.Sprintf("127.0.0.1:%d", port),
		APIKey:  o.APIKey,
		LogPath: filepath.Join(dir, "spaced.log"),
	}
	if d.APIKey == "" {
		d.APIKey = NewAPIKey()
	}
	if d.DataDir == "" {
		d.DataDir = filepath.Join(dir, "data")
	}
	d.Client = client.New(d.Addr, d.APIKey)
	daemons.mu.Lock()
	daemons.all = append(daemons.all, d)
	daemons.mu.Unlock()
	if o.Prepare != nil {
		if err := o.Prepare(d.DataDir); err != nil {
			return d, fmt.Errorf("prepare %s: %w", o.Name, err)
		}
	}
	return d, d.start(filepath.Join(bin, "spaced"))
}

// Own starts a daemon for t alone (on its own address range). Its log's
// tail is printed if t fails; when t ends, every sandbox it still runs is
// killed and it is shut down (started again first if the test left it
// dead, so that it can kill them).
func Own(t testing.TB, o Options) *Daemon {
	t.Helper()
	Need(t)
	d, err := Start(o)
	if d == nil {
		t.Fatalf("start spaced %s: %v", o.Name, err)
	}
	d.DumpOnFailure(t)
	t.Cleanup(func() {
		if err == nil && !d.Healthy() {
			d.Restart()
		}
		if err := d.Shutdown(); err != nil {
			t.Logf("shut down spaced %s: %v", o.Name, err)
		}
	})
	if err != nil {
		t.Fatalf("start spaced %s: %v", o.Name, err)
	}
	return d
}

// Restart starts spaced again on the same data dir, address and key (after
// Stop or Kill9), with Opts as they are now.
func (d *Daemon) Restart() error {
	bin, err := Build()
	if err != nil {
		return err
	}
	return d.start(filepath.Join(bin, "spaced"))
}

func (d *Daemon) start(spaced string) error {
	d.note("starting spaced")
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(spaced)
	cmd.Env = append(os.Environ(), d.env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a signal meant for the test (^C at the
	// terminal) does not reach spaced, which is stopped only by Stop,
	// Kill9 or Shutdown, the way the tests mean to stop it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.mu.Lock()
	d.cmd, d.done = cmd, done
	d.mu.Unlock()

	limit := d.Opts.StartTimeout
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-done:
			return fmt.Errorf("spaced exited at start: %s", cmd.ProcessState)
		default:
		}
		if d.HealthyWithin(2*time.Second) == nil {
			return nil
		}
	}
	d.Kill9()
	return fmt.Errorf("spaced did not answer /healthz within %s", limit)
}

// note adds a line of the harness's own to spaced's log, so that the log
// tells what the test did to the daemon (starts, kills) in its place.
func (d *Daemon) note(format string, args ...any) {
	f, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "===== %s: %s: %s\n", suite.name, time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// env is spaced's configuration for this daemon, on top of the test's own
// environment.
func (d *Daemon) env() []string {
	o := d.Opts
	env := []string{
		"SPACE_DATA_DIR=" + d.DataDir,
		"SPACE_TEMPLATES_DIR=" + o.TemplatesDir,
		"SPACE_RUNSC=" + testenv.Runsc(),
		"SPACE_API_KEY=" + d.APIKey,
		"SPACE_ADDR=" + d.Addr,
		"SPACE_SANDBOX_CIDR=" + o.CIDR,
		"SPACE_LOG_LEVEL=debug",
	}
	if o.BootTimeout > 0 {
		env = append(env, "SPACE_AGENT_BOOT_TIMEOUT="+o.BootTimeout.String())
	}
	if o.Catalog != "" {
		env = append(env, "SPACE_DATABASE_URL="+o.Catalog, "SPACE_NODE_ID="+o.Name, "SPACE_NODE_ADDRESS=http://"+d.Addr)
		if o.Lease > 0 {
			env = append(env, "SPACE_NODE_LEASE="+o.Lease.String())
		}
	}
	if o.NoPool {
		env = append(env, "SPACE_POOL=")
	} else if o.Pool != "" {
		env = append(env, "SPACE_POOL="+o.Pool)
	}
	return append(env, o.Env...) // for duplicates, exec uses the last
}

// Healthy reports whether /healthz answers 200 within 2 s.
func (d *Daemon) Healthy() bool { return d.HealthyWithin(2*time.Second) == nil }

// HealthyWithin checks that /healthz answers 200 within limit.
func (d *Daemon) HealthyWithin(limit time.Duration) error {
	hc := &http.Client{Timeout: limit}
	resp, err := hc.Get("http://" + d.Addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: status %d", resp.StatusCode)
	}
	return nil
}

// Pid is the running spaced's process id.
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid
}

// Stop sends SIGTERM and waits for spaced to exit; it is an error when
// spaced takes over 20 s (it is then killed) or exits unsuccessfully.
func (d *Daemon) Stop() error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	d.note("SIGTERM to spaced")
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

// Kill9 kills spaced with SIGKILL; its sandboxes live on (they are not its
// children), as after a crash.
func (d *Daemon) Kill9() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	d.note("kill -9 of spaced")
	cmd.Process.Kill()
	<-done
}

// Shutdown kills every sandbox the daemon still runs (they outlive spaced
// by design), stops it, and removes what spaced keeps on the host across
// its restarts but this daemon, gone for good, no longer needs. It
// returns Stop's error.
func (d *Daemon) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sbs, err := d.Client.ListAllSandboxes(ctx, client.ListOptions{States: []string{"creating", "running", "resuming"}}); err == nil {
		var wg sync.WaitGroup
		for _, sb := range sbs {
			d.note("killing sandbox %s, still %s at shutdown", sb.ID, sb.State)
			wg.Add(1)
			go func() { defer wg.Done(); d.Client.KillSandbox(ctx, sb.ID) }()
		}
		wg.Wait()
	}
	err := d.Stop()
	// A sandbox still in runsc's state after the kills and the stop was
	// missed by both (a create or resume that finished in between, or a
	// bug): it would outlive the data dir. Destroyed, and said loudly.
	if left := d.destroyLeftovers(); len(left) > 0 {
		msg := fmt.Sprintf("spaced %s left %d sandboxes running after its shutdown, destroyed now: %s", d.Opts.Name, len(left), strings.Join(left, ", "))
		d.note("%s", msg)
		fmt.Fprintln(os.Stderr, "harness:", msg)
		if path := os.Getenv("SPACE_TEST_LEFTOVERS"); path != "" {
			if f, ferr := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
				fmt.Fprintf(f, "%s: %s: %s\n", time.Now().UTC().Format(time.RFC3339), suite.name, msg)
				f.Close()
			}
		}
		err = errors.Join(err, errors.New(msg))
	}
	// runsc mounts a namespace at <root>/null-netns (sometimes twice); it
	// outlives spaced and would keep the data dir from being removed.
	for syscall.Unmount(filepath.Join(d.DataDir, "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
	}
	// spaced keeps its egress firewall table when it stops (its sandboxes
	// may outlive it).
	if p, perr := netip.ParsePrefix(d.Opts.CIDR); perr == nil {
		egress.RemoveRules(p)
	}
	return err
}

// destroyLeftovers force-deletes every sandbox in this daemon's runsc
// state and returns their ids.
func (d *Daemon) destroyLeftovers() []string {
	root := filepath.Join(d.DataDir, "runsc")
	out, err := exec.Command(testenv.Runsc(), "--root", root, "list", "-quiet").Output()
	if err != nil {
		return nil
	}
	var left []string
	for _, id := range strings.Fields(string(out)) {
		left = append(left, id)
		if out, err := exec.Command(testenv.Runsc(), "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			d.note("delete leftover sandbox %s: %v: %s", id, err, out)
		}
	}
	return left
}

// LogTail returns the last n lines of spaced's log, headed by its path.
func (d *Daemon) LogTail(n int) string {
	data, _ := os.ReadFile(d.LogPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), d.LogPath, strings.Join(lines, "\n"))
}

// DumpOnFailure logs the tail of spaced's log when t has failed by its end.
func (d *Daemon) DumpOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.LogTail(60))
		}
	})
}

// NewAPIKey is a fresh admin key: 40 hex digits after "<suite>_", the
// shape every E2B SDK accepts.
func NewAPIKey() string { return suite.name + "_" + RandHex(20) }

// RandHex is n random bytes in hex, for names and secrets no one guesses.
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cidrLocks are the address ranges this test binary holds, each by an
// exclusive flock on a file named for it, kept until the binary exits: two
// runs of one suite at once (from two checkouts on one machine) would
// otherwise give their sandboxes the same addresses. The second waits.
var cidrLocks struct {
	mu   sync.Mutex
	held map[string]*os.File
}

func lockCIDR(cidr string) error {
	if cidr == "" {
		return nil
	}
	cidrLocks.mu.Lock()
	defer cidrLocks.mu.Unlock()
	if cidrLocks.held[cidr] != nil {
		return nil
	}
	dir := filepath.Join(os.TempDir(), "space-test-cidr-locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(cidr)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(os.Stderr, "harness: another test run uses %s; waiting for it to end\n", cidr)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", cidr, err)
		}
	}
	if cidrLocks.held == nil {
		cidrLocks.held = map[string]*os.File{}
	}
	cidrLocks.held[cidr] = f
	return nil
}
