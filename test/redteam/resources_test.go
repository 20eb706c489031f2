package redteam

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
	"github.com/spacesandbox/space/test/harness"
)

// responsive checks, while an attack runs, that spaced's /healthz and a
// command in the neighbour answer within generous bounds, every 500 ms
// until stop is closed. It returns the slowest answer seen.

// forcedCharge is how far a memory cgroup's usage may pass its limit
// without anything escaping it: the kernel force-charges the pages a task
// needs while it dies of the cgroup's OOM kill (try_charge_memcg's force
// path), seen here as a few pages over (12 KiB in CI). A real escape is
// the attack's whole allocation, hundreds of MiB.
const forcedCharge = 1 << 20

// agentWarnings is what a sandbox's agent logged at warn and above, for a
// failure's message: a neighbour's command that failed says what its agent
// saw.
func agentWarnings(d *harness.Daemon, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, err := d.Client.SandboxLogs(ctx, id, client.LogsOptions{Level: "warn", Limit: 20, Backward: true})
	if err != nil {
		return "not read: " + err.Error()
	}
	if len(lines) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n  %s %s %s %v", l.Time.Format(time.RFC3339Nano), l.Level, l.Message, l.Fields)
	}
	return b.String()
}

func responsive(t *testing.T, d *harness.Daemon, stop <-chan struct{}) func() (time.Duration, error) {
	n := getNeighbour(t, d)
	var mu sync.Mutex
	var worst time.Duration
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			start := time.Now()
			err := d.HealthyWithin(5 * time.Second)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var r harness.Result
				r, err = d.Exec(ctx, n.sb.ID, client.CommandRequest{Cmd: "cat " + neighbourMarkerPath})
				cancel()
				if err == nil && r.Stdout != n.marker {
					err = fmt.Errorf("neighbour marker reads %q", r.Stdout)
				}
			}
			mu.Lock()
			if el := time.Since(start); el > worst {
				worst = el
			}
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%w (the neighbour's agent log, warnings and worse: %s)", err, agentWarnings(d, n.sb.ID))
			}
			mu.Unlock()
		}
	}()
	return func() (time.Duration, error) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return worst, firstErr
	}
}

// underAttack runs attack while checking responsiveness and spaced's RSS.
// A neighbour command and /healthz must answer within 10 s each time, and
// spaced may grow by at most 200 MiB.
func underAttack(t *testing.T, d *harness.Daemon, attack func() error) error {
	before := spacedRSS(t, d)
	stop := make(chan struct{})
	wait := responsive(t, d, stop)
	err := attack()
	close(stop)
	worst, rerr := wait()
	after := spacedRSS(t, d)
	t.Logf("spaced RSS %d -> %d KiB; slowest /healthz + neighbour command: %s", before, after, worst.Round(time.Millisecond))
	switch {
	case err != nil:
		return err
	case rerr != nil:
		return fmt.Errorf("while the attack ran: %w", rerr)
	case worst > 10*time.Second:
		return fmt.Errorf("spaced or the neighbour took %s to answer during the attack", worst)
	case after-before > 200<<10:
		return fmt.Errorf("spaced grew from %d to %d KiB", before, after)
	}
	return nil
}

// sandboxDisk is what sandbox id takes of the host's disk: the file that
// backs its writable layer (runsc keeps it open, unlinked: found among its
// sandbox process's descriptors) and its directories under the data dir.
// The host's free space would count every other suite running beside; this
// counts the sandbox's own. found says the layer's file was there (the
// control: a measure that finds nothing proves nothing).
func sandboxDisk(t *testing.T, d *harness.Daemon, id string) (bytes int64, found bool) {
	pid := d.SandboxPid(t, id)
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(fdDir)
	for _, fd := range fds {
		p := filepath.Join(fdDir, fd.Name())
		if target, err := os.Readlink(p); err != nil || !strings.Contains(target, "runsc-filestore") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			bytes += st.Blocks * 512
			found = true
		}
	}
	for _, dir := range []string{filepath.Join(d.DataDir, "sandboxes", id), filepath.Join(d.DataDir, "runsc", id)} {
		filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err == nil {
				if info, err := e.Info(); err == nil {
					if st, ok := info.Sys().(*syscall.Stat_t); ok {
						bytes += st.Blocks * 512
					}
				}
			}
			return nil
		})
	}
	return bytes, found
}

// diskWithin: sandbox id (made with a disk of limitMB) takes at most its
// limit and 32 MiB more of the host's disk.
func diskWithin(t *testing.T, d *harness.Daemon, id string, limitMB int64) error {
	used, found := sandboxDisk(t, d, id)
	if !found {
		return fmt.Errorf("control: the file of sandbox %s's writable layer is not among its sandbox process's descriptors", id)
	}
	t.Logf("sandbox %s takes %d MiB of the host's disk (limit %d MB)", id, used>>20, limitMB)
	if used > (limitMB+32)<<20 {
		return fmt.Errorf("the host lost %d MiB of disk to a %d MB sandbox", used>>20, limitMB)
	}
	return nil
}

// stillServes: after the attack the sandbox runs a command (or, if it died
// of it, spaced says so), and the neighbour is fine.
func stillServes(t *testing.T, d *harness.Daemon, id string) error {
	var r harness.Result
	var err error
	var got *client.Sandbox
	ended := false
	if harness.WaitFor(20*time.Second, func() bool {
		if g, gerr := d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), id); gerr == nil && g.State != client.StateRunning {
			got, ended = g, true
			return true
		}
		r, err = d.Exec(harness.Ctx(t, 10*time.Second), id, client.CommandRequest{Cmd: "echo ok"})
		return err == nil && r.Stdout == "ok\n"
	}) {
		if ended {
			t.Logf("the sandbox ended of the attack: %s (%s)", got.State, got.Reason)
		}
		return nil
	}
	return fmt.Errorf("the sandbox neither serves (%v) nor is reported ended", err)
}

// flood writes 64 KiB lines to stdout as fast as it can, until killed
// (attempts/flood.py).
var flood = floodCmd("")

// floodMiB writes n MiB to stdout as fast as it can.
func floodMiB(n int) string { return floodCmd(strconv.Itoa(n)) }

func floodCmd(arg string) string {
	src, err := scripts.ReadFile("attempts/flood.py")
	if err != nil {
		panic(err)
	}
	return "python3 - " + arg + " <<'PY'\n" + string(src) + "PY"
}

// cgroupValue reads one file of sandbox id's host cgroups ("" if none has it).
func cgroupValue(id, file string) string {
	for _, dir := range gvisor.CgroupDirs(id) {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// cgroupField reads "key value" lines of a cgroup file (cpu.stat,
// pids.events) and returns value of key.
func cgroupField(id, file, key string) int64 {
	for _, line := range strings.Split(cgroupValue(id, file), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

// cpuUsage is the host CPU time of sandbox id's cgroup.
func cpuUsage(id string) time.Duration {
	if v := cgroupValue(id, "cpuacct.usage"); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		return time.Duration(n)
	}
	return time.Duration(cgroupField(id, "cpu.stat", "usage_usec")) * time.Microsecond
}

// sampler reads f every 100 ms until stopped, and keeps the samples.
type sample struct {
	at time.Time
	v  int64
}

func sampleWhile(f func() int64) (stop func() []sample) {
	done := make(chan struct{})
	out := make(chan []sample, 1)
	go func() {
		var ss []sample
		for {
			ss = append(ss, sample{time.Now(), f()})
			select {
			case <-done:
				out <- ss
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() []sample { close(done); return <-out }
}

func maxOf(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// forkBomb runs a fork bomb as uid in a sandbox limited to 64 processes,
// counting the tasks of uid inside and the host pids cgroup meanwhile.
func forkBomb(t *testing.T, uid int, shell bool) error {
	const limit = 64
	sb := env.d.NewSandbox(t, client.CreateSandboxRequest{MaxProcesses: limit})
	pidsMax, _ := strconv.ParseInt(cgroupValue(sb.ID, "pids.max"), 10, 64)
	return underAttack(t, env.d, func() error {
		stop := sampleWhile(func() int64 { n, _ := strconv.ParseInt(cgroupValue(sb.ID, "pids.current"), 10, 64); return n })
		r, err := inside(t, env.d, sb.ID, "root", "res.fork_bomb", map[string]any{"uid": uid, "shell": shell}, time.Minute)
		samples := stop()
		if err != nil && uid == 0 {
			// Known weakness: the agent runs as root, so root's bomb takes
			// the tasks its Go runtime needs, and the sandbox ends.
			t.Logf("root's bomb ended the sandbox (%v): checking containment", err)
			if err := reportedEnded(t, env.d, sb.ID, ""); err != nil {
				return err
			}
			return pidsPeak(t, samples, pidsMax, -1)
		}
		if err != nil {
			return err
		}
		// gVisor counts tasks (threads too) per user; a command's first
		// process, made by root and then given the user's uid, stays
		// charged to root, hence one more for a user.
		most := limit
		if uid != 0 {
			most++
		}
		switch peak := int(r.n("peak_tasks")); {
		case int(r.n("limit")) != limit:
			return fmt.Errorf("RLIMIT_NPROC inside is %v, want %d", r["limit"], limit)
		case peak > most || int(r.n("classic_peak")) > most:
			return fmt.Errorf("uid %d held %d tasks (the classic bomb %v) under RLIMIT_NPROC %d", uid, peak, r["classic_peak"], limit)
		case peak < limit-4:
			return fmt.Errorf("control: the bomb reached only %d tasks of %d: it did not run into the limit", peak, limit)
		case uid == 0 && r.s("fork_at_limit") != "EAGAIN":
			return fmt.Errorf("a fork at the limit failed with %q, want EAGAIN", r.s("fork_at_limit"))
		case !r.b("recovered") || !r.b("fork_after"):
			return fmt.Errorf("after the bomb was killed uid %d holds %v tasks besides the agent (%v before it; %v with the agent) and a fork works: %v",
				uid, r["after_others"], r["baseline_others"], r["after"], r["fork_after"])
		}
		if err := pidsPeak(t, samples, pidsMax, cgroupField(sb.ID, "pids.events", "max")); err != nil {
			return err
		}
		return stillServes(t, env.d, sb.ID)
	})
}

// pidsPeak checks samples of a host pids cgroup against its limit max;
// hits is pids.events' count of refusals (-1 when the cgroup is gone).
func pidsPeak(t *testing.T, samples []sample, max, hits int64) error {
	var peak int64
	for _, s := range samples {
		peak = maxOf(peak, s.v)
	}
	t.Logf("host pids cgroup: peak %d of %d, limit hit %d times", peak, max, hits)
	switch {
	case max <= 0 || peak <= 0:
		return fmt.Errorf("could not read the sandbox's host pids cgroup (max %d, peak %d)", max, peak)
	case peak >= max || hits > 0:
		return fmt.Errorf("the host pids cgroup reached its limit: peak %d of %d, %d refusals", peak, max, hits)
	}
	return nil
}

// reportedEnded: spaced reports sandbox id ended (with a reason holding
// reason) and it left nothing on the host.
func reportedEnded(t *testing.T, d *harness.Daemon, id, reason string) error {
	var got *client.Sandbox
	var err error
	if !harness.WaitFor(15*time.Second, func() bool {
		got, err = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), id)
		return err == nil && got.State != client.StateRunning
	}) {
		return fmt.Errorf("the sandbox does not serve but spaced still reports it %+v (%v)", got, err)
	}
	if !strings.Contains(got.Reason, reason) {
		return fmt.Errorf("the sandbox ended %s with reason %q, want one about %q", got.State, got.Reason, reason)
	}
	if left := d.Leftovers(id); !harness.WaitFor(15*time.Second, func() bool { left = d.Leftovers(id); return len(left) == 0 }) {
		return fmt.Errorf("the ended sandbox left %v on the host", left)
	}
	t.Logf("the sandbox ended: %s (%s), nothing left on the host", got.State, got.Reason)
	return nil
}

// cpuSpin spins 4 processes for secs seconds in a sandbox of cpus CPUs
// and returns the CPU time they got per second of wall time, inside and
// on the host cgroup, and how often the host throttled it.
func cpuSpin(t *testing.T, cpus, secs int) (inRatio, hostRatio float64, throttled int64, err error) {
	sb := env.d.NewSandbox(t, client.CreateSandboxRequest{CPU: cpus})
	th0 := cgroupField(sb.ID, "cpu.stat", "nr_throttled")
	stop := sampleWhile(func() int64 { return int64(cpuUsage(sb.ID)) })
	r, err := inside(t, env.d, sb.ID, "root", "res.cpu_spin", map[string]any{"procs": 4, "seconds": secs}, time.Minute)
	samples := stop()
	if err != nil {
		return 0, 0, 0, err
	}
	// The host's rate over the time the spinners ran, their first half
	// second (fork, start) left out.
	from := time.Unix(0, int64(r.n("start")*1e9)).Add(500 * time.Millisecond)
	to := time.Unix(0, int64(r.n("end")*1e9))
	var first, last *sample
	for i := range samples {
		if s := &samples[i]; !s.at.Before(from) && !s.at.After(to) {
			if first == nil {
				first = s
			}
			last = s
		}
	}
	if first == nil || last == first || last.at.Sub(first.at) < time.Second {
		return 0, 0, 0, fmt.Errorf("too few host samples of the cgroup's CPU time while the spinners ran")
	}
	hostRatio = float64(last.v-first.v) / float64(last.at.Sub(first.at))
	return r.n("ratio"), hostRatio, cgroupField(sb.ID, "cpu.stat", "nr_throttled") - th0, nil
}

// busy is the share of the host's CPU time that was not idle during f.
func busy(f func()) float64 {
	read := func() (idle, total int64) {
		b, _ := os.ReadFile("/proc/stat")
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
			if i == 3 || i == 4 {
				idle += n
			}
		}
		return
	}
	i0, t0 := read()
	f()
	i1, t1 := read()
	if t1 == t0 {
		return 0
	}
	return 1 - float64(i1-i0)/float64(t1-t0)
}

func resourceAttempts() []attempt {
	sandbox := func(t *testing.T, req client.CreateSandboxRequest) *client.Sandbox { return env.d.NewSandbox(t, req) }
	runFor := func(t *testing.T, id, user, cmd string, secs int) (harness.Result, error) {
		return env.d.Exec(harness.Ctx(t, time.Duration(secs+60)*time.Second), id, client.CommandRequest{Cmd: cmd, User: user, TimeoutSeconds: secs})
	}
	return []attempt{
		{id: "res-fork-bomb", category: "resources", desc: "shell fork bombs as the default user in a sandbox with max_processes 64: the classic bomb() { bomb | bomb & } for 2 s (in gVisor its shells exit as fast as they fork: it peaks at about 10 tasks), then a loop starting background sleeps until refused; the user's tasks are counted inside, the sandbox's pids on the host", stops: "RLIMIT_NPROC enforced by the sentry: the user holds at most 64 tasks (65 with the command's first process, which gVisor charges to root); the host pids cgroup (limit 4 x 64 + 256) is never reached",
			control: "the bomb reaches the limit (at least 60 tasks), and after it is killed the user forks again",
			run:     func(t *testing.T) error { return forkBomb(t, 1000, true) }},
		{id: "res-fork-bomb-root", category: "resources", desc: "python os.fork() bomb as root (root is not exempt), tasks counted as for res-fork-bomb", stops: "RLIMIT_NPROC holds root's tasks at 64 (a fork at the limit fails with EAGAIN); but the agent is root too, so the bomb can take the tasks its Go runtime needs and end the sandbox (known weakness; some runs): contained, spaced reports it lost and cleans up, the host pids cgroup stays under its limit, neighbours are untouched (were the sandbox to survive, the counts of res-fork-bomb apply)",
			run: func(t *testing.T) error { return forkBomb(t, 0, false) }},
		{id: "res-memory", category: "resources", desc: "allocate and touch 2 GiB, 50 MiB at a time, in a 256 MB sandbox", stops: "memory cgroup of the sandbox (the sentry sees it as its RAM): the allocation fails, or (what happens today) the sandbox alone is killed at the limit and spaced reports it lost, out of memory, leaving nothing on the host; the host cgroup's limit is 256 MiB and its usage never passes it (but for the few pages the kernel force-charges to a task while it is OOM-killed)",
			control: "the host cgroup's usage reaches 100 MiB (the allocation ran)",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MemoryMB: 256})
				limit, _ := strconv.ParseInt(cgroupValue(sb.ID, "memory.limit_in_bytes")+cgroupValue(sb.ID, "memory.max"), 10, 64)
				if limit != 256<<20 {
					return fmt.Errorf("the host memory limit is %d, want %d", limit, 256<<20)
				}
				return underAttack(t, env.d, func() error {
					stop := sampleWhile(func() int64 {
						n, _ := strconv.ParseInt(cgroupValue(sb.ID, "memory.usage_in_bytes")+cgroupValue(sb.ID, "memory.current"), 10, 64)
						return n
					})
					r, err := inside(t, env.d, sb.ID, "root", "res.memory", map[string]any{"chunks": 40, "mib": 50}, time.Minute)
					var peak int64
					for _, x := range stop() {
						peak = maxOf(peak, x.v)
					}
					t.Logf("host memory cgroup: limit %d MiB, peak seen %d MiB", limit>>20, peak>>20)
					switch {
					case peak > limit+forcedCharge:
						return fmt.Errorf("the host memory cgroup held %d bytes, over its limit %d", peak, limit)
					case peak < 100<<20:
						return fmt.Errorf("control: the sandbox never held 100 MiB (peak %d MiB)", peak>>20)
					case err != nil:
						// The sentry itself was killed at the limit: the
						// sandbox alone, reported lost.
						return reportedEnded(t, env.d, sb.ID, "memory")
					case r.n("allocated_mib") >= 2048:
						return fmt.Errorf("a 256 MB sandbox held 2 GiB")
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-cpu-spin", category: "resources", desc: "spin 4 processes for 4 s in a cpu 1 sandbox; CPU time is measured inside (per wall second) and on the host cgroup", stops: "CFS quota of the sandbox's cgroup: the host cgroup's CPU time grows by at most 1.15 s per second and the host throttles it (inside, gVisor's own accounting also counts time the host throttled, 1.2 to 1.4, so it is logged, not checked)",
			control: "the same spin in a cpu 2 sandbox gets more than 1.3 CPU-seconds per second on the host or, when the shared host is too busy to give it that, is never throttled",
			run: func(t *testing.T) error {
				in, host, throttled, err := cpuSpin(t, 1, 4)
				if err != nil {
					return err
				}
				t.Logf("cpu 1: %.2f CPU-s/s inside, %.2f on the host cgroup, throttled %d times", in, host, throttled)
				switch {
				case host > 1.15:
					return fmt.Errorf("a cpu 1 sandbox used %.2f CPU-s/s on the host (%.2f by its own account)", host, in)
				case throttled <= 0:
					return fmt.Errorf("the host never throttled the cpu 1 sandbox (%d): the quota did not bite", throttled)
				}
				// Control: the same spin without the quota gets more, or,
				// on a host too busy to give it more, is never throttled.
				for try := 1; ; try++ {
					var in2, host2 float64
					var throttled2 int64
					load := busy(func() { in2, host2, throttled2, err = cpuSpin(t, 2, 4) })
					if err != nil {
						return err
					}
					t.Logf("control, cpu 2: %.2f CPU-s/s inside, %.2f on the host, throttled %d times; the host was %.0f%% busy", in2, host2, throttled2, load*100)
					if host2 > 1.3 || throttled2 == 0 {
						return nil
					}
					if try == 2 {
						return fmt.Errorf("control: a cpu 2 sandbox got only %.2f CPU-s/s on the host and was throttled %d times: the measure cannot tell the quota from a busy host", host2, throttled2)
					}
				}
			}},
		{id: "res-fd-exhaustion", category: "resources", desc: "open files (backed by the host through the gofer) until the descriptor limit or 200,000, holding them while the host counts the descriptors of the sandbox's runsc processes", stops: "the sentry's own file table: guest descriptors are not host descriptors (runsc holds a few hundred whatever the guest opens)",
			control: "the guest raises its soft limit (1,024) to the hard one and opens 200,000 descriptors (or stops at EMFILE past 50,000, or holds 50,000 when its 15 s are up on a slow machine)",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					fds := func() int64 {
						var n int64
						for _, p := range harness.RunscProcs(sb.ID) {
							n += int64(len(harness.DirEntries(fmt.Sprintf("/proc/%d/fd", p.Pid))))
						}
						return n
					}
					before := fds()
					stop := sampleWhile(fds)
					r, err := inside(t, env.d, sb.ID, "root", "res.open_files", nil, time.Minute)
					samples := stop()
					if err != nil {
						return err
					}
					var peak int64
					for _, s := range samples {
						peak = maxOf(peak, s.v)
					}
					t.Logf("guest opened %v (%s); runsc's host descriptors %d before, at most %d during", r["opened"], r.s("err"), before, peak)
					// Refused (past the default soft limit of 1,024, which
					// the attempt raises to the hard one), or out of time
					// with far more open than runsc's host descriptors could
					// follow, is a working control; fewer is a guest that
					// could not try.
					full := r.n("opened") >= 200000 || ((r.s("err") == "EMFILE" || r.s("err") == "ENFILE") && r.n("opened") >= 50000)
					if !full && !(r.s("err") == "time" && r.n("opened") >= 50000) {
						return fmt.Errorf("control: the guest opened %v descriptors and stopped with %q", r["opened"], r.s("err"))
					}
					if peak > before+1000 {
						return fmt.Errorf("runsc's host descriptors grew from %d to %d with the guest's", before, peak)
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-inode-exhaustion", category: "resources", desc: "create empty files for 10 s or until the disk refuses (64 MB disk)", stops: "the overlay's size limit and the sandbox's memory limit; the sandbox's own use of the host disk (its layer's file) checked",
			control: "thousands of files are made",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				return underAttack(t, env.d, func() error {
					r, err := inside(t, env.d, sb.ID, "root", "res.make_files", nil, time.Minute)
					if err != nil {
						return err
					}
					if r.n("created") < 1000 {
						return fmt.Errorf("control: only %v files were made (%s)", r["created"], r.s("err"))
					}
					if err := diskWithin(t, env.d, sb.ID, 64); err != nil {
						return err
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-thread-explosion", category: "resources", desc: "start threads until refused or 10,000 (max_processes 64)", stops: "RLIMIT_NPROC counts threads in the sentry: root's tasks stay at 64; guest threads are sentry goroutines, not host threads (host pids cgroup checked)",
			control: "threads start until the limit refuses one",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
				pidsMax, _ := strconv.ParseInt(cgroupValue(sb.ID, "pids.max"), 10, 64)
				return underAttack(t, env.d, func() error {
					stop := sampleWhile(func() int64 { n, _ := strconv.ParseInt(cgroupValue(sb.ID, "pids.current"), 10, 64); return n })
					r, err := inside(t, env.d, sb.ID, "root", "res.threads_until_refused", nil, time.Minute)
					samples := stop()
					if err != nil {
						return err
					}
					switch {
					case r.s("err") == "" || r.n("threads") == 0:
						return fmt.Errorf("control: %v threads started and none was refused (%q)", r["threads"], r.s("err"))
					case r.n("tasks") > 64:
						return fmt.Errorf("root holds %v tasks under a limit of 64", r["tasks"])
					}
					if err := pidsPeak(t, samples, pidsMax, cgroupField(sb.ID, "pids.events", "max")); err != nil {
						return err
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-disk-fill", category: "resources", desc: "fill the disk: dd 300 MB into a 64 MB sandbox, then fallocate 10 GiB", stops: "the overlay's size (disk_mb); the sandbox's own use of the host disk (its layer's file) checked",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				r, _ := runFor(t, sb.ID, "root", "dd if=/dev/zero of=/home/user/big bs=1M count=300; fallocate -l 10G /home/user/big2; df -m /", 60)
				if err := diskWithin(t, env.d, sb.ID, 64); err != nil {
					return err
				}
				if !strings.Contains(r.Stderr, "No space left") {
					return fmt.Errorf("dd into a 64 MB disk did not hit ENOSPC: %q", r.Stderr)
				}
				return stillServes(t, env.d, sb.ID)
			}},
		{id: "res-disk-fill-api", category: "resources", desc: "upload a 1 GiB stream through the API into a 64 MB sandbox", stops: "the overlay's size; the agent answers 507 and spaced streams without buffering",
			control: "a 1 MiB upload to the same sandbox succeeds first",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				if _, err := env.d.Client.Upload(harness.Ctx(t, time.Minute), sb.ID, "/home/user/small", io.LimitReader(zeroReader{}, 1<<20)); err != nil {
					return fmt.Errorf("control: a 1 MiB upload failed: %w", err)
				}
				return underAttack(t, env.d, func() error {
					_, err := env.d.Client.Upload(harness.Ctx(t, time.Minute), sb.ID, "/home/user/upload", io.LimitReader(zeroReader{}, 1<<30))
					var apiErr *client.APIError
					if !errors.As(err, &apiErr) || apiErr.Status != http.StatusInsufficientStorage {
						return fmt.Errorf("the 1 GiB upload ended with %v, want the server's 507", err)
					}
					t.Logf("upload: %v", err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-sparse-download", category: "resources", desc: "a 1 TiB sparse file streamed out through the API for 5 s, and read with a Range at its end", stops: "spaced streams files and never buffers them; the client's pace bounds it",
			control: "the Range read returns the file's last bytes",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				sh(t, env.d, sb.ID, "root", "truncate -s 1T /home/user/sparse && echo end >> /home/user/sparse")
				return underAttack(t, env.d, func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					rc, err := env.d.Client.Download(ctx, sb.ID, "/home/user/sparse")
					if err != nil {
						return err
					}
					n, _ := io.Copy(io.Discard, rc)
					rc.Close()
					t.Logf("read %d MiB in 5 s", n>>20)
					if n < 1<<20 {
						return fmt.Errorf("control: only %d bytes streamed in 5 s", n)
					}
					st, _, body, err := raw(harness.Ctx(t, 30*time.Second), env.d, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=/home/user/sparse", nil,
						map[string]string{"Range": fmt.Sprintf("bytes=%d-", int64(1)<<40)})
					if err != nil || st != http.StatusPartialContent || string(body) != "end\n" {
						return fmt.Errorf("control: the Range read at 1 TiB gave %d %q (%v)", st, body, err)
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood", category: "resources", desc: "flood 64 MiB through stdout with a client reading as fast as it can", stops: "the agent's bounded per-process buffer; spaced relays event by event",
			control: "tens of MiB arrive at the client",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "user", floodMiB(64), 60)
					t.Logf("flood read %d MiB (%v)", len(r.Stdout)>>20, err)
					if len(r.Stdout) < 16<<20 {
						return fmt.Errorf("control: only %d bytes of the flood arrived", len(r.Stdout))
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood-unread", desc: "flood stdout for 8 s through an SSE client that never reads", stops: "spaced writes each event with a deadline (30 s) and holds no more than one event per stream; the agent's buffer is bounded",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					c, err := stalledSSE(env.d, "/v1/sandboxes/"+sb.ID+"/commands", `{"cmd":`+quoteJSON(flood)+`,"timeout_seconds":8}`)
					if err != nil {
						return err
					}
					time.Sleep(8 * time.Second) // the attack is the client not reading, for this long
					c.Close()
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood-background", category: "resources", desc: "flood stdout for 6 s from a background command nobody attaches to, then attach from the start", stops: "the agent's per-process buffer (4 MiB) drops old output and says so with a gap event",
			control: "the replay holds a gap event and megabytes of output",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					c, err := env.d.Client.StartBackground(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: flood, TimeoutSeconds: 6})
					if err != nil {
						return err
					}
					// Attach only once the command has ended, so that the
					// whole flood went into the buffer unread.
					if !harness.WaitFor(20*time.Second, func() bool {
						r, err := env.d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: fmt.Sprintf("! kill -0 %d 2>/dev/null", c.PID), User: "root"})
						return err == nil && r.Exit.Code() == 0
					}) {
						return fmt.Errorf("the background flood did not end")
					}
					s, err := env.d.Client.CommandEvents(harness.Ctx(t, 30*time.Second), sb.ID, c.PID, 0)
					if err != nil {
						return err
					}
					defer s.Close()
					n, gap, first := 0, false, ""
					for {
						ev, err := s.Next()
						if err != nil || ev.Type == client.EventEnd {
							break
						}
						if first == "" {
							first = ev.Type
						}
						gap = gap || ev.Type == client.EventGap
						n += len(ev.Data)
					}
					t.Logf("replayed %d KiB, first event %s, gap %v", n>>10, first, gap)
					switch {
					case n > 16<<20:
						return fmt.Errorf("replayed %d MiB: the buffer is not bounded", n>>20)
					case !gap || n < 1<<20:
						return fmt.Errorf("control: the replay (first event %q) had gap %v and %d bytes, want a gap event and the buffer", first, gap, n)
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-parallel-floods", category: "resources", desc: "8 commands flooding 8 MiB each through stdout at once", stops: "per-process buffers; streams are independent",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					var wg sync.WaitGroup
					for i := 0; i < 8; i++ {
						wg.Add(1)
						go func() { defer wg.Done(); runFor(t, sb.ID, "user", floodMiB(8), 60) }()
					}
					wg.Wait()
					return stillServes(t, env.d, sb.ID)
				})
			}},
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func quoteJSON(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// stalledSSE opens an SSE request with a tiny receive buffer, reads the
// response head, and then never reads again.
func stalledSSE(d *harness.Daemon, path, body string) (net.Conn, error) {
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		return nil, err
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, d.APIKey, len(body), body)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c, nil
}

func TestResources(t *testing.T) {
	d := need(t)
	t.Parallel()
	getNeighbour(t, d)
	// Three at a time: together they must still leave spaced responsive,
	// and the package must stay quick on two cores.
	sem := make(chan struct{}, 3)
	t.Run("attempts", func(t *testing.T) {
		for _, a := range resourceAttempts() {
			t.Run(a.id, func(t *testing.T) {
				t.Parallel()
				// The CPU measure runs alone, so that the other attacks do
				// not take the CPU its control needs.
				n := 1
				if a.id == "res-cpu-spin" {
					n = cap(sem)
				}
				for i := 0; i < n; i++ {
					sem <- struct{}{}
				}
				defer func() {
					for i := 0; i < n; i++ {
						<-sem
					}
				}()
				if err := a.run(t); err != nil {
					t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
				}
			})
		}
	})
	guard(t, d)
}
