package redteam

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// responsive checks, while an attack runs, that spaced's /healthz and a
// command in the neighbour answer within generous bounds, every 500 ms
// until stop is closed. It returns the slowest answer seen.
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
				firstErr = err
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

// diskFree is the free space of the file system holding spaced's data.
func diskFree(d *harness.Daemon) uint64 {
	var st syscall.Statfs_t
	syscall.Statfs(d.DataDir, &st)
	return st.Bavail * uint64(st.Bsize)
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

const floodPy = `python3 -c "import sys
b = b'A' * 65535 + b'\n'
while True: sys.stdout.buffer.write(b)"`

// floodMiB writes n MiB to stdout as fast as it can.
func floodMiB(n int) string {
	return fmt.Sprintf(`python3 -c "import sys
b = b'A' * 65535 + b'\n'
for i in range(%d): sys.stdout.buffer.write(b)"`, n*16)
}

func resourceAttempts() []attempt {
	sandbox := func(t *testing.T, req client.CreateSandboxRequest) *client.Sandbox { return env.d.NewSandbox(t, req) }
	runFor := func(t *testing.T, id, user, cmd string, secs int) (harness.Result, error) {
		return env.d.Exec(harness.Ctx(t, time.Duration(secs+60)*time.Second), id, client.CommandRequest{Cmd: cmd, User: user, TimeoutSeconds: secs})
	}
	return []attempt{
		{id: "res-fork-bomb", category: "resources", desc: "shell fork bomb in a sandbox with max_processes 64", stops: "RLIMIT_NPROC enforced by the sentry (EAGAIN inside); host pids cgroup as a backstop",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
				return underAttack(t, env.d, func() error {
					runFor(t, sb.ID, "user", `bomb() { bomb | bomb & }; bomb; sleep 8`, 10)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-fork-bomb-root", category: "resources", desc: "python os.fork() bomb as root (root is not exempt)", stops: "RLIMIT_NPROC enforced by the sentry for root too (no CAP_SYS_RESOURCE)",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
				return underAttack(t, env.d, func() error {
					runFor(t, sb.ID, "root", `python3 -c "
import os, time
while True:
    try: os.fork()
    except OSError: time.sleep(0.01)
"`, 8)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-memory", category: "resources", desc: "allocate and touch 2 GiB in a 256 MB sandbox", stops: "memory cgroup of the sandbox (the sentry sees it as its RAM); at worst the sandbox alone is killed and reported lost",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MemoryMB: 256})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "root", `python3 -c "
held = []
for i in range(40): held.append(bytearray(50 << 20)); print(i, flush=True)
print('allocated 2 GiB')"`, 20)
					if err == nil && strings.Contains(r.Stdout, "allocated 2 GiB") {
						return fmt.Errorf("a 256 MB sandbox held 2 GiB")
					}
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-cpu-spin", category: "resources", desc: "spin 8 processes for 8 s in a cpu 1 sandbox", stops: "CFS quota of the sandbox's cgroup",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{CPU: 1})
				return underAttack(t, env.d, func() error {
					runFor(t, sb.ID, "user", `for i in 1 2 3 4 5 6 7 8; do timeout 8 sh -c 'while :; do :; done' & done; wait`, 12)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-fd-exhaustion", category: "resources", desc: "open files (backed by the host through the gofer) until the descriptor limit or 200,000", stops: "the sentry's own file table (RLIMIT_NOFILE); gofer-backed files share host descriptors, bounded by runsc's own limit",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "root", `python3 -c "
import os, time
fds = []; end = time.time() + 15; err = ''
while len(fds) < 200000 and time.time() < end:
    try: fds.append(os.open('/etc/hostname' if len(fds) % 2 else '/usr/bin/python3.11', os.O_RDONLY))
    except OSError as e: err = e.strerror; break
print(len(fds), err)"`, 30)
					t.Logf("opened: %q %v", strings.TrimSpace(r.Stdout), err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-inode-exhaustion", category: "resources", desc: "create empty files until the disk refuses or 100,000 (64 MB disk)", stops: "the overlay's size limit and the sandbox's memory limit",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "root", `python3 -c "
import os, time
os.makedirs('/home/user/i', exist_ok=True); n = 0; end = time.time() + 15; err = ''
while n < 100000 and time.time() < end:
    try: open('/home/user/i/%d' % n, 'w').close(); n += 1
    except OSError as e: err = e.strerror; break
print(n, err)"`, 30)
					t.Logf("created: %q %v", strings.TrimSpace(r.Stdout), err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-thread-explosion", category: "resources", desc: "start threads until refused or 10,000 (max_processes 64)", stops: "the sentry's task limit; guest threads are sentry goroutines, not host threads",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "root", `python3 -c "
import threading, time
ev = threading.Event(); n = 0; err = ''
try:
    while n < 10000:
        threading.Thread(target=ev.wait, daemon=True).start(); n += 1
except Exception as e: err = str(e)
print(n, err); ev.set()"`, 30)
					t.Logf("threads: %q %v", strings.TrimSpace(r.Stdout), err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-disk-fill", category: "resources", desc: "fill the disk: dd 300 MB into a 64 MB sandbox, then fallocate 10 GiB", stops: "the overlay's size (disk_mb); host free space checked",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				free := diskFree(env.d)
				r, _ := runFor(t, sb.ID, "root", "dd if=/dev/zero of=/home/user/big bs=1M count=300; fallocate -l 10G /home/user/big2; df -m /", 60)
				if used := int64(free) - int64(diskFree(env.d)); used > 200<<20 {
					return fmt.Errorf("the host lost %d MiB of disk to a 64 MB sandbox", used>>20)
				}
				if !strings.Contains(r.Stderr, "No space left") {
					return fmt.Errorf("dd into a 64 MB disk did not hit ENOSPC: %q", r.Stderr)
				}
				return stillServes(t, env.d, sb.ID)
			}},
		{id: "res-disk-fill-api", category: "resources", desc: "upload a 1 GiB stream through the API into a 64 MB sandbox", stops: "the overlay's size; the agent answers 507 and spaced streams without buffering",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{DiskMB: 64})
				return underAttack(t, env.d, func() error {
					_, err := env.d.Client.Upload(harness.Ctx(t, time.Minute), sb.ID, "/home/user/upload", io.LimitReader(zeroReader{}, 1<<30))
					if err == nil {
						return fmt.Errorf("1 GiB fitted into a 64 MB disk")
					}
					t.Logf("upload: %v", err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-sparse-download", category: "resources", desc: "a 1 TiB sparse file streamed out through the API (and read with a Range at its end)", stops: "spaced streams files and never buffers them; the client's pace bounds it",
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
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood", category: "resources", desc: "flood 64 MiB through stdout with a client reading as fast as it can", stops: "the agent's bounded per-process buffer; spaced relays event by event",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					r, err := runFor(t, sb.ID, "user", floodMiB(64), 60)
					t.Logf("flood read %d MiB (%v)", len(r.Stdout)>>20, err)
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood-unread", category: "resources", desc: "flood stdout for 10 s through an SSE client that never reads", stops: "spaced writes each event with a deadline (30 s) and holds no more than one event per stream; the agent's buffer is bounded",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					c, err := stalledSSE(env.d, "/v1/sandboxes/"+sb.ID+"/commands", `{"cmd":`+quoteJSON(floodPy)+`,"timeout_seconds":10}`)
					if err != nil {
						return err
					}
					time.Sleep(10 * time.Second) // the attack is the client not reading
					c.Close()
					return stillServes(t, env.d, sb.ID)
				})
			}},
		{id: "res-stdout-flood-background", category: "resources", desc: "flood stdout for 8 s from a background command nobody attaches to, then attach from the start", stops: "the agent's per-process buffer (4 MiB) drops old output and says so with a gap event",
			run: func(t *testing.T) error {
				sb := sandbox(t, client.CreateSandboxRequest{})
				return underAttack(t, env.d, func() error {
					c, err := env.d.Client.StartBackground(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: floodPy, TimeoutSeconds: 8})
					if err != nil {
						return err
					}
					time.Sleep(9 * time.Second)
					s, err := env.d.Client.CommandEvents(harness.Ctx(t, 30*time.Second), sb.ID, c.PID, 0)
					if err != nil {
						return err
					}
					defer s.Close()
					n := 0
					for {
						ev, err := s.Next()
						if err != nil || ev.Type == client.EventEnd {
							break
						}
						n += len(ev.Data)
					}
					if n > 16<<20 {
						return fmt.Errorf("replayed %d MiB: the buffer is not bounded", n>>20)
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
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := a.run(t); err != nil {
					t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
				}
			})
		}
	})
	guard(t, d)
}
