package e2e

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// stillFine checks that spaced answers and sandbox id runs a command.
func stillFine(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	if !d.Healthy() {
		t.Fatal("spaced does not answer /healthz")
	}
	if got := sh(t, d, id, "echo ok"); got != "ok\n" {
		t.Errorf("echo ok in %s printed %q", id, got)
	}
}

func TestLimitMemory(t *testing.T) {
	d := need(t)
	t.Parallel()
	neighbour := d.NewSandbox(t, client.CreateSandboxRequest{})
	sb := d.NewSandbox(t, client.CreateSandboxRequest{MemoryMB: 256})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := d.Exec(ctx, sb.ID, client.CommandRequest{Cmd: `python3 -c '
import sys
held = []
for i in range(20):
    held.append(bytearray(50 << 20))
    print((i + 1) * 50, "MiB", flush=True)
print("allocated 1 GiB")
'`})
	switch {
	case err != nil:
		// The sandbox died (the host OOM killer killed its sentry). Then
		// spaced must say so rather than keep calling it running.
		t.Logf("the command stream broke or hung: %v", err)
		var got *client.Sandbox
		ok := harness.WaitFor(10*time.Second, func() bool {
			got, err = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), sb.ID)
			return err == nil && got.State != client.StateRunning
		})
		if !ok {
			_, rerr := d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "echo ok"})
			t.Errorf("the sandbox died of its memory limit (a command stream hung for 30s; echo ok now gives %v) "+
				"but spaced still reports it %q: nothing notices a sandbox that exits while spaced runs", rerr, got.State)
		}
	case r.Exit.Code() == 0 || strings.Contains(r.Stdout, "allocated 1 GiB"):
		t.Errorf("a 256 MB sandbox allocated 1 GiB: %+v, stdout %q", *r.Exit, r.Stdout)
	default:
		t.Logf("allocation stopped: exit %+v after %q, stderr %q", *r.Exit, lastLine(r.Stdout), lastLine(r.Stderr))
	}
	stillFine(t, d, neighbour.ID)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func TestLimitForkBomb(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
	start := time.Now()
	r, err := d.Exec(harness.Ctx(t, 60*time.Second), sb.ID, client.CommandRequest{
		Cmd: `bomb() { bomb | bomb & }; bomb; sleep 30`, TimeoutSeconds: 10,
	})
	if err != nil {
		t.Fatalf("fork bomb stream: %v", err)
	}
	t.Logf("fork bomb ended after %s: %+v, stderr %q", time.Since(start).Round(time.Millisecond), *r.Exit, lastLine(r.Stderr))
	if time.Since(start) > 30*time.Second {
		t.Errorf("timeout_seconds 10 took %s", time.Since(start))
	}
	if got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), sb.ID); err != nil || got.State != client.StateRunning {
		t.Fatalf("after the fork bomb the sandbox is %+v (%v)", got, err)
	}
	// Leftover bomb processes may hold the limit for a moment.
	var out harness.Result
	ok := harness.WaitFor(20*time.Second, func() bool {
		out, err = d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "echo ok"})
		return err == nil && out.Exit.Code() == 0 && out.Stdout == "ok\n"
	})
	if !ok {
		ps, _ := d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "ps -e | wc -l", User: "root"})
		t.Fatalf("the sandbox cannot run echo ok after the fork bomb: %+v %v %q (processes as seen by root: %q)", out.Exit, err, out.Stderr, ps.Stdout)
	}
	stillFine(t, d, sb.ID)
}

func TestLimitDisk(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{DiskMB: 64})
	r := run(t, d, sb.ID, client.CommandRequest{Cmd: "dd if=/dev/zero of=/home/user/big bs=1M count=200"})
	if r.Exit.Code() == 0 || !strings.Contains(r.Stderr, "No space left") {
		t.Errorf("writing 200 MB into 64 MB: exit %+v, stderr %q", *r.Exit, r.Stderr)
	}
	sh(t, d, sb.ID, "rm -f /home/user/big")
	stillFine(t, d, sb.ID)
	// Space is given back.
	sh(t, d, sb.ID, "dd if=/dev/zero of=/home/user/small bs=1M count=16 2>/dev/null")
}

// cpuLoad forks argv[1] workers that spin until argv[2] seconds have
// passed (a cap: the test kills the sandbox once it has measured).
const cpuLoad = `import os, sys, time
n, end = int(sys.argv[1]), time.time() + float(sys.argv[2])
for _ in range(n):
    if os.fork() == 0:
        while time.time() < end:
            pass
        os._exit(0)
for _ in range(n):
    os.wait()
`

// TestLimitCPU measures the CPU time sandboxes get from the host while
// they run one more busy worker than the host has cores: a cpu=1 sandbox
// is held to about one CPU, and a cpu=2 sandbox, the positive control, gets
// clearly more (or, on a host busy with other work, is never throttled),
// so a quota that is not applied, a quota too low and a load that does not
// run all fail. Not parallel: the cpu=2 figure needs the host's cores.
func TestLimitCPU(t *testing.T) {
	d := need(t)
	cores := goruntime.NumCPU()
	if cores < 2 {
		t.Fatalf("the host has %d CPU; the cpu=2 control needs 2", cores)
	}
	for _, cpu := range []int{1, 2} {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{CPU: cpu})
		if sb.CPU != cpu {
			t.Errorf("sandbox reports cpu %d, want %d", sb.CPU, cpu)
		}
		// runsc sets the guest's CPU count from the quota, rounded up but
		// never below 2 (runsc/sandbox/sandbox.go: fewer CPUs can make
		// programs drop locks), and never above the host's.
		nproc := strings.TrimSpace(sh(t, d, sb.ID, "nproc"))
		if want := min(cores, max(2, cpu)); nproc != strconv.Itoa(want) {
			t.Errorf("nproc in a cpu=%d sandbox on %d cores: %s, want %d", cpu, cores, nproc, want)
		}

		window := startCPULoad(t, d, sb.ID, cores+1)
		var rate, host float64
		var throttled int64
		for try := 1; ; try++ {
			rate, host, throttled = window()
			t.Logf("cpu=%d: nproc %s, %d workers used %.2f CPU-s per wall second (host total %.2f), throttled in %d periods",
				cpu, nproc, cores+1, rate, host, throttled)
			// Other work on the host (another test package, another
			// user) can take the CPU the control needs: measure again.
			if cpu == 1 || rate > 1.2 || host-rate < 0.3 || try == 3 {
				break
			}
		}
		// (Throttling is only logged: when other work holds a core, a cpu=1
		// sandbox gets its one CPU by fair share without meeting its quota.)
		switch why := "its load did not run, or something limits it to one CPU"; {
		case cpu == 1 && rate > 1.2:
			t.Errorf("a cpu=1 sandbox used %.2f CPU-s per second, want at most 1.2", rate)
		case cpu == 2 && rate <= 1.2 && rate > 0.5 && host-rate >= 0.3 && throttled == 0:
			// The host is busy with other work (the suite runs its
			// packages in parallel): the sandbox got less than two CPUs by
			// fair share, and its quota never throttled it, so the quota
			// is not what held it (a cpu=2 sandbox held to one CPU by a
			// wrong quota is throttled in most periods).
			t.Logf("host busy: the cpu=2 sandbox got %.2f CPU-s per second by fair share and was never throttled", rate)
		case cpu == 2 && rate <= 1.2:
			if host-rate >= 0.3 {
				why = "or other work on the host took the CPU it needed"
			}
			t.Errorf("a cpu=2 sandbox used only %.2f CPU-s per second (the rest of the host %.2f), want clearly more than 1.2: %s",
				rate, host-rate, why)
		}

		// Its load stops with it, before the next sandbox is measured.
		if err := d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID); err != nil {
			t.Fatal(err)
		}
		if !harness.WaitFor(15*time.Second, func() bool { return len(harness.RunscProcs(sb.ID)) == 0 }) {
			t.Fatalf("sandbox %s still has processes after kill: %v", sb.ID, harness.RunscProcs(sb.ID))
		}
	}
}

// startCPULoad starts the load in sandbox id and waits until its cgroup
// shows it running. The function it returns measures one 3 s window: the
// CPU time the sandbox used per wall second, the host's total for
// comparison, and the periods in which the sandbox's quota ran out.
func startCPULoad(t *testing.T, d *harness.Daemon, id string, workers int) func() (rate, host float64, throttled int64) {
	t.Helper()
	load := make(chan error, 1)
	go func() {
		r, err := d.Exec(context.Background(), id, client.CommandRequest{Argv: []string{"python3", "-c", cpuLoad, strconv.Itoa(workers), "60"}})
		if err == nil && r.Exit.Code() != 0 {
			err = fmt.Errorf("exit %+v, stderr %q", *r.Exit, r.Stderr)
		}
		load <- err
	}()
	sample := func() (harness.CPUStat, time.Time) {
		t.Helper()
		st, err := harness.SandboxCPU(id)
		if err != nil {
			t.Fatal(err)
		}
		return st, time.Now()
	}
	prev, prevAt := sample()
	prevHost := hostBusy(t)
	// Running: most of a CPU over a second (starting python alone costs
	// a burst, not that), or, while the host's cores are all busy (other
	// test packages run beside this one), a steady share of them in every
	// window of three seconds in a row.
	var r, h float64
	busyWindows := 0
	running := harness.WaitFor(30*time.Second, func() bool {
		st, at := sample()
		if at.Sub(prevAt) < time.Second {
			return false
		}
		host := hostBusy(t)
		wall := at.Sub(prevAt).Seconds()
		r, h = (st.Usage-prev.Usage).Seconds()/wall, (host-prevHost).Seconds()/wall
		prev, prevAt, prevHost = st, at, host
		if r >= 0.25 && h >= 0.9*float64(goruntime.NumCPU()) {
			busyWindows++
		} else {
			busyWindows = 0
		}
		return r >= 0.8 || busyWindows >= 3
	})
	if !running {
		select {
		case err := <-load:
			t.Fatalf("the CPU load in %s ended before it showed: %v", id, err)
		default:
			t.Fatalf("the CPU load in %s did not show in its cgroup within 30s (last second: %.2f CPU-s, host %.2f)", id, r, h)
		}
	}
	return func() (rate, host float64, throttled int64) {
		t.Helper()
		start, startAt := sample()
		hostStart := hostBusy(t)
		time.Sleep(3 * time.Second) // the measurement window, not a wait for state
		end, endAt := sample()
		wall := endAt.Sub(startAt).Seconds()
		select {
		case err := <-load:
			t.Fatalf("the CPU load in %s ended during the window: %v", id, err)
		default:
		}
		return (end.Usage - start.Usage).Seconds() / wall, (hostBusy(t) - hostStart).Seconds() / wall, end.Throttled - start.Throttled
	}
}

// hostBusy is the CPU time all of the host's CPUs have spent not idle.
func hostBusy(t *testing.T) time.Duration {
	t.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	// "cpu user nice system idle iowait irq softirq steal ..." in USER_HZ (100).
	f := strings.Fields(strings.SplitN(string(raw), "\n", 2)[0])
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// TestLimitOpenFiles: a command starts with the soft limit of open files
// most Linux systems give (1,024: x11vnc, for one, walks every possible
// descriptor for each new viewer), and may raise it to the hard limit,
// for both the default user and root.
func TestLimitOpenFiles(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	for _, user := range []string{"user", "root"} {
		r, err := d.Exec(harness.Ctx(t, 30*time.Second), sb.ID, client.CommandRequest{User: user,
			Cmd: `ulimit -Sn; ulimit -Hn; ulimit -n "$(ulimit -Hn)" && ulimit -Sn`})
		if err != nil || r.Exit.Code() != 0 {
			t.Fatalf("%s: %v %+v %q", user, err, r.Exit, r.Stderr)
		}
		if want := "1024\n1048576\n1048576\n"; r.Stdout != want {
			t.Errorf("%s: soft, hard, raised soft: %q, want %q", user, r.Stdout, want)
		}
	}
}
