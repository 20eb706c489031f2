package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/runtimetest"
	"github.com/spacesandbox/space/internal/testenv"
)

// The conformance suite against real runsc. It needs root, runsc and the
// base template (scripts/install-deps.sh and scripts/build-template.sh).
func TestConformance(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	dir := runscDir(t)
	plan := network.Plan{CIDR: netip.MustParsePrefix("10.239.0.0/24")}
	var slot int
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Runtime {
			r, err := New(Config{Runsc: runsc, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		Spec: func(t *testing.T, id string) runtime.Spec {
			slot = (slot + 1) % plan.Slots()
			ep, err := plan.Endpoint(id, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := network.Attach(ep); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { network.Detach(ep) })
			return runtime.Spec{
				ID:     id,
				RootFS: rootfs,
				Netns:  ep.NetnsPath,
				Args:   []string{"/bin/sleep", "infinity"},
				Env:    []string{"PATH=/usr/bin:/bin"},
				Limits: runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 64, MaxProcs: 128},
			}
		},
		Busy: func(spec *runtime.Spec) {
			spec.Args = []string{"/bin/sh", "-c", "head -c 33554432 /dev/urandom > /big && while :; do :; done"}
		},
		CPULimit: func(t *testing.T, id string) float64 {
			v, err := cpuLimit(id)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		CPUPriority: func(t *testing.T, id string) int {
			n, err := cpuShares(id)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		Leftovers: func(t *testing.T, id string) []string {
			var left []string
			if out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output(); strings.TrimSpace(string(out)) != "" {
				left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
			}
			left = append(left, CgroupDirs(id)...)
			if d := filepath.Join(dir, "sandboxes", id); exists(d) {
				left = append(left, d)
			}
			return left
		},
	})
}

// TestSeccompPrecompiled: the installed runsc does not compile its sentry's
// and gofer's seccomp programs at a sandbox's start (~24 ms of each create
// here) but loads the ones scripts/install-deps.sh precompiled for the
// configuration spaced runs, as runsc's debug log of a sandbox says.
func TestSeccompPrecompiled(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	dir := runscDir(t)
	r, err := New(Config{Runsc: runsc, Dir: dir, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	id := runtimetest.NewID()
	ep, err := network.Plan{CIDR: netip.MustParsePrefix("10.239.1.0/24")}.Endpoint(id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := network.Attach(ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { network.Detach(ep) })
	runSandbox(t, r, id, rootfs, ep.NetnsPath, "/bin/sleep", "infinity")
	for _, part := range []string{"boot", "gofer"} {
		logs, _ := filepath.Glob(filepath.Join(r.sandboxDir(id), "debug", "*."+part+".txt"))
		if len(logs) == 0 {
			t.Fatalf("runsc wrote no %s debug log", part)
		}
		data, err := os.ReadFile(logs[0])
		if err != nil {
			t.Fatal(err)
		}
		log := string(data)
		switch {
		case strings.Contains(log, "Loaded precompiled seccomp instructions"):
			t.Logf("%s: precompiled seccomp program loaded", part)
		case strings.Contains(log, "No precompiled program found"):
			i := strings.Index(log, "No precompiled program found")
			t.Errorf("%s compiled its seccomp program at start: %s (rebuild runsc: scripts/install-deps.sh --force-runsc)", part, log[i:i+min(400, len(log)-i)])
		default:
			t.Errorf("the %s log says nothing of its seccomp program (%d bytes)", part, len(log))
		}
	}
}

// A zombie is not alive: kill(pid, 0) succeeds on it until it is reaped.
func TestProcessAliveZombie(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for ProcessAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // exited but not waited for: a zombie
	}
	if ProcessAlive(pid) {
		t.Fatal("an exited, unreaped child is reported alive")
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the child was reaped already; the test did not see a zombie")
	}
	cmd.Wait()
	if !ProcessAlive(os.Getpid()) {
		t.Fatal("this process is reported dead")
	}
	if ProcessAlive(0) || ProcessAlive(-1) {
		t.Fatal("pid 0 or -1 reported alive")
	}
}

// cpuShares reads a sandbox's cpu.shares (cgroup v1) or cpu.weight (v2).
func cpuShares(id string) (int, error) {
	for _, dir := range CgroupDirs(id) {
		for _, file := range []string{"cpu.shares", "cpu.weight"} {
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err == nil {
				return strconv.Atoi(strings.TrimSpace(string(data)))
			}
		}
	}
	return 0, fmt.Errorf("no cpu cgroup for %s", id)
}

// cpuLimit reads the CPUs sandbox id's cgroup allows (quota over period).
func cpuLimit(id string) (float64, error) {
	for _, dir := range CgroupDirs(id) {
		if data, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
			var quota, period float64
			if _, err := fmt.Sscan(string(data), &quota, &period); err != nil {
				return 0, fmt.Errorf("cpu.max %q: %w", data, err)
			}
			return quota / period, nil
		}
		quota, qerr := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		period, perr := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if qerr == nil && perr == nil {
			q, err1 := strconv.ParseFloat(strings.TrimSpace(string(quota)), 64)
			p, err2 := strconv.ParseFloat(strings.TrimSpace(string(period)), 64)
			if err1 != nil || err2 != nil || p == 0 {
				return 0, fmt.Errorf("cpu quota %q over period %q", quota, period)
			}
			return q / p, nil
		}
	}
	return 0, fmt.Errorf("no cpu cgroup for %s", id)
}

// A sandbox that stops on its own says why: its init's end from the
// sentry's log, or an engine failure when the sentry panicked (the panic in
// the operator's log, not in the reason). runsc's test-only flag turns the
// afs_syscall system call into a sentry panic; the control is the same
// sandbox without it, which survives the call and has no reason.
func TestExitReason(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	if goruntime.GOARCH != "amd64" {
		t.Skip("afs_syscall (183) exists on amd64 only")
	}
	const afs = "import ctypes, time; ctypes.CDLL(None).syscall(183); time.sleep(600)"
	for _, tc := range []struct {
		name       string
		flags      string
		script     string
		wantReason string // "" for a sandbox that keeps running
		wantLogged string
	}{
		{"control: afs_syscall without the panic flag", "", afs, "", ""},
		{"the sentry panics", "--TESTONLY-afs-syscall-panic", afs, "sandbox engine failed", "User workload triggered a panic via afs_syscall"},
		{"init exits", "", "import sys; sys.exit(3)", "init process ended (exit status 3)", "application exiting with exit status 3"},
		{"init is killed", "", "import os; os.abort()", "init process ended (killed by signal 6)", "application exiting with killed by signal 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := runscDir(t)
			wrapper := filepath.Join(dir, "runsc-wrapper")
			if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+runsc+" "+tc.flags+" \"$@\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			var logMu sync.Mutex
			r, err := New(Config{Runsc: wrapper, Dir: dir, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
			if err != nil {
				t.Fatal(err)
			}
			id := "exitreason" + strconv.Itoa(os.Getpid())
			ctx := t.Context()
			runSandbox(t, r, id, rootfs, "", "/usr/bin/python3", "-c", tc.script)
			stopped := func() bool {
				st, err := r.State(ctx, id)
				return err == nil && st == runtime.StateStopped
			}
			wait := 20 * time.Second
			if tc.wantReason == "" {
				wait = 3 * time.Second // well after python made the call
			}
			for deadline := time.Now().Add(wait); !stopped() && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
			}
			why := r.ExitReason(ctx, id)
			logMu.Lock()
			logged := logs.String()
			logMu.Unlock()
			t.Logf("reason %q; logged %.300s", why, logged)
			if tc.wantReason == "" {
				if stopped() || why != "" {
					t.Fatalf("the control stopped (%v) or has a reason %q: %s", stopped(), why, headOf(r.panicLogFile(id), 1<<10))
				}
				return
			}
			if !stopped() {
				t.Fatal("the sandbox did not stop")
			}
			if !strings.Contains(why, tc.wantReason) {
				t.Errorf("ExitReason = %q, want %q in it", why, tc.wantReason)
			}
			if !strings.Contains(logged, tc.wantLogged) {
				t.Errorf("the operator's log lacks %q: %s", tc.wantLogged, logged)
			}
			if strings.Contains(why, "goroutine") || len(why) > 120 {
				t.Errorf("the reason carries the engine's internals: %q", why)
			}
		})
	}
}

// runscDir is a fresh directory for a driver's runsc root and sandboxes.
// runsc pins one shared "null" network namespace for gofers under its
// root; it is per node, not per sandbox, and is unmounted before the
// directory is removed.
func runscDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		for syscall.Unmount(filepath.Join(dir, "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
		}
	})
	return dir
}

// runSandbox runs sandbox id of rootfs with args as its init (in netns, or
// none when ""), with small limits, and destroys it when the test ends.
func runSandbox(t *testing.T, r *Runtime, id, rootfs, netns string, args ...string) {
	t.Helper()
	if err := r.Run(t.Context(), runtime.Spec{ID: id, RootFS: rootfs, Netns: netns, Args: args, Env: []string{"PATH=/usr/bin:/bin"},
		Limits: runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 64, MaxProcs: 128}}); err != nil {
		t.Fatal(err)
	}
	// Not t.Context(): it is cancelled before cleanups run.
	t.Cleanup(func() { r.Destroy(context.Background(), id) })
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A running sandbox's boot.log is emptied once it is over maxBootLog, and
// left alone below it.
func TestBoundBootLog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size      int
		wantEmpty bool
	}{
		{"under the bound", maxBootLog - 1, false},
		{"at the bound", maxBootLog, false},
		{"over the bound", maxBootLog + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{cfg: Config{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}}
			const id = "boundlogtest"
			if err := os.MkdirAll(r.sandboxDir(id), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(r.bootLogFile(id), bytes.Repeat([]byte("x"), tc.size), 0o644); err != nil {
				t.Fatal(err)
			}
			r.boundBootLog(id)
			st, err := os.Stat(r.bootLogFile(id))
			if err != nil {
				t.Fatal(err)
			}
			if empty := st.Size() == 0; empty != tc.wantEmpty {
				t.Errorf("a boot.log of %d bytes is %d after boundBootLog", tc.size, st.Size())
			}
		})
	}
}

// The runtime's sweep empties a running sandbox's boot.log once it is over
// maxBootLog and leaves a stopped sandbox's whole (ExitReason reads it),
// with real runsc.
func TestRunLogBound(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	dir := runscDir(t)
	r, err := New(Config{Runsc: runsc, Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	boot := func(name, script string) string {
		id := name + strconv.Itoa(os.Getpid())
		runSandbox(t, r, id, rootfs, "", "/usr/bin/python3", "-c", script)
		return id
	}
	running := boot("logboundrun", "import time; time.sleep(600)")
	stopped := boot("logboundstop", "import sys; sys.exit(3)")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, err := r.State(ctx, stopped); err == nil && st == runtime.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox whose init exits did not stop")
		}
	}
	if st, err := r.State(ctx, running); err != nil || st != runtime.StateRunning {
		t.Fatalf("the sleeping sandbox is %v, %v; want running", st, err)
	}
	padding := bytes.Repeat([]byte("padding\n"), maxBootLog/8+1)
	// The running sentry appends to its log; the stopped one's ends with
	// how its init ended, which must stay its end.
	f, err := os.OpenFile(r.bootLogFile(running), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(padding); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tail, err := os.ReadFile(r.bootLogFile(stopped))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.bootLogFile(stopped), append(padding, tail...), 0o644); err != nil {
		t.Fatal(err)
	}

	sweep, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r.RunLogBound(sweep, 50*time.Millisecond); close(done) }()
	size := func(id string) int64 {
		st, err := os.Stat(r.bootLogFile(id))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	for deadline := time.Now().Add(5 * time.Second); size(running) > maxBootLog && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a few more sweeps over the stopped one
	cancel()
	<-done
	if n := size(running); n > maxBootLog {
		t.Errorf("the running sandbox's boot.log is %d bytes after the sweep, want it emptied", n)
	}
	if n := size(stopped); n <= maxBootLog {
		t.Errorf("the stopped sandbox's boot.log is %d bytes after the sweep, want it whole (%d)", n, len(padding)+len(tail))
	}
	if why := r.ExitReason(ctx, stopped); !strings.Contains(why, "exit status 3") {
		t.Errorf("the stopped sandbox's reason is %q after the sweep, want its exit status 3", why)
	}
}

// A sandbox's runsc runs with systrap's fast path off unless the config
// leaves it on, and runsc takes the flag: with real runsc, the sentry's
// own log shows the flag it was started with, and the sandbox runs.
func TestFastPathFlag(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	for _, tc := range []struct {
		name     string
		fastPath bool
		wantFlag bool
	}{
		{"default: off", false, true},
		{"left on", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := runscDir(t)
			r, err := New(Config{Runsc: runsc, Dir: dir, FastPath: tc.fastPath, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := "fastpath" + strconv.Itoa(os.Getpid())
			runSandbox(t, r, id, rootfs, "", "/bin/sleep", "infinity")
			if st, err := r.State(ctx, id); err != nil || st != runtime.StateRunning {
				t.Fatalf("the sandbox is %v, %v; want running", st, err)
			}
			log, err := os.ReadFile(r.bootLogFile(id))
			if err != nil {
				t.Fatal(err)
			}
			args := ""
			for line := range strings.Lines(string(log)) {
				if strings.Contains(line, "Args: [runsc-sandbox") {
					args = line
					break
				}
			}
			if args == "" {
				t.Fatalf("the sentry's log has no Args line:\n%.2000s", log)
			}
			if got := strings.Contains(args, "--systrap-disable-fast-path"); got != tc.wantFlag {
				t.Fatalf("--systrap-disable-fast-path in the sentry's arguments: %v, want %v\n%s", got, tc.wantFlag, args)
			}
		})
	}
}
