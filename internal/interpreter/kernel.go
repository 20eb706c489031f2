package interpreter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// launcher starts kernels: everything a kernel process needs that is the
// same for all of them.
type launcher struct {
	python     string // interpreter with ipykernel installed
	runDir     string // per-kernel directories (sockets, connection file)
	ipythonDir string // IPYTHONDIR: the profile holding our startup file
	env        []string
	cred       *syscall.Credential // nil: run as the server's user
	addrSpace  uint64              // RLIMIT_AS per kernel; 0: none
	startLimit time.Duration
	log        *slog.Logger
}

// bootstrap starts ipykernel as `python -m ipykernel_launcher` would,
// after setting RLIMIT_AS (soft and hard: the kernel's user cannot raise
// it again) to its first argument unless that is 0, and giving the
// kernel's PUB or XPUB socket (IOPub) a deeper queue than ZeroMQ's default of 1000
// messages, past which it drops output silently while we are slow to read
// (a flood of flushed prints on a busy machine). Its depth is the second
// argument.
const bootstrap = `import resource, runpy, sys
n, hwm = int(sys.argv.pop(1)), int(sys.argv.pop(1))
if n:
    resource.setrlimit(resource.RLIMIT_AS, (n, n))
import zmq
_socket = zmq.Context.socket
def _space_socket(self, socket_type, *args, **kwargs):
    s = _socket(self, socket_type, *args, **kwargs)
    if socket_type in (zmq.PUB, zmq.XPUB):
        s.setsockopt(zmq.SNDHWM, hwm)
    return s
zmq.Context.socket = _space_socket
runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)`

// iopubQueue is the kernel's IOPub queue, in messages (each a few hundred
// bytes to the output limit; RLIMIT_AS bounds what a stalled reader can
// make the kernel hold).
const iopubQueue = 100000

// kernel is one running ipykernel process and our connection to it.
type kernel struct {
	cmd    *exec.Cmd
	client *jupyter.Client
	dir    string
	exited chan struct{} // closed once the process has been waited for
	state  *os.ProcessState
	ended  atomic.Int32 // an endReason: why we killed it, if we did
}

// start launches a kernel in cwd and returns it once it answers. A kernel
// that fails to come up is killed and its directory removed.
func (l *launcher) start(ctx context.Context, id, cwd string) (_ *kernel, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.startLimit)
	defer cancel()
	dir := filepath.Join(l.runDir, id+"-"+jupyter.NewID()[:8])
	if err := l.mkdir(dir); err != nil {
		return nil, err
	}
	k := &kernel{dir: dir, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			k.kill()
		}
	}()
	info := jupyter.NewIPC(filepath.Join(dir, "k"))
	info.KernelName = "python3"
	connFile := filepath.Join(dir, "connection.json")
	if err := info.WriteFile(connFile); err != nil {
		return k, err
	}
	if err := l.chown(connFile); err != nil {
		return k, err
	}

	args := []string{"-f", connFile,
		// Plain tracebacks, as E2B's kernels give (no ANSI colours).
		"--InteractiveShell.colors=NoColor",
		// History in memory: In[] works, and no sqlite file is written
		// (or locked) in a home directory.
		"--HistoryManager.hist_file=:memory:",
	}
	// The limit is set by the kernel's Python itself, before it loads
	// anything: Go cannot give one child an rlimit, and prlimit(2) on a
	// child that runs as another user needs CAP_SYS_RESOURCE.
	args = append([]string{"-c", bootstrap, strconv.FormatUint(l.addrSpace, 10), strconv.Itoa(iopubQueue)}, args...)
	k.cmd = exec.Command(l.python, args...)
	k.cmd.Dir = cwd
	k.cmd.Env = append(l.env, "JPY_PARENT_PID="+strconv.Itoa(os.Getpid()))
	// Its own process group: an interrupt reaches the processes the cell
	// started too, and a kill leaves nothing behind.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: l.cred}
	out := &lineLogger{log: l.log.With("kernel", id)}
	k.cmd.Stdout, k.cmd.Stderr = out, out
	if err := k.cmd.Start(); err != nil {
		return k, fmt.Errorf("start %s: %w", l.python, err)
	}
	go func() {
		_ = k.cmd.Wait()
		k.state = k.cmd.ProcessState
		close(k.exited)
	}()
	if err := waitForSockets(ctx, info.SocketPaths(), k.exited); err != nil {
		return k, err
	}
	c, err := jupyter.Dial(info, l.log.With("kernel", id))
	if err != nil {
		return k, fmt.Errorf("connect to kernel: %w", err)
	}
	k.client = c
	// A kernel that dies ends every request waiting on it.
	go func() {
		select {
		case <-k.exited:
			c.Close(fmt.Errorf("kernel exited: %s", k.state))
		case <-c.Done():
		}
	}()
	if err := c.WaitReady(ctx); err != nil {
		return k, fmt.Errorf("wait for kernel: %w", err)
	}
	return k, nil
}

// waitForSockets waits until the kernel has bound its sockets (ZeroMQ
// cannot dial a unix socket before it exists).
func waitForSockets(ctx context.Context, paths []string, exited <-chan struct{}) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		missing := ""
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				missing = p
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-exited:
			return errors.New("kernel exited while starting (see the server log)")
		case <-ctx.Done():
			return fmt.Errorf("kernel did not listen on %s: %w", missing, ctx.Err())
		case <-t.C:
		}
	}
}

// interrupt sends SIGINT to the kernel's process group, as jupyter_client
// does for kernels with the "signal" interrupt mode: ipykernel turns it
// into KeyboardInterrupt in the running cell.
func (k *kernel) interrupt() error {
	if k.cmd == nil || k.cmd.Process == nil {
		return errors.New("kernel not started")
	}
	if err := syscall.Kill(-k.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupt kernel: %w", err)
	}
	return nil
}

// alive reports whether the kernel process still runs.
func (k *kernel) alive() bool {
	select {
	case <-k.exited:
		return false
	default:
		return k.cmd != nil && k.cmd.Process != nil
	}
}

// kill ends the kernel's whole process group, waits for it and removes
// its directory. A kernel's state is gone anyway, so there is no polite
// shutdown_request first: it would only make a restart slower.
func (k *kernel) kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.exited
	}
	if k.client != nil {
		k.client.Close(nil)
	}
	_ = os.RemoveAll(k.dir)
}

// exitStatus describes how the process ended ("" while it runs).
func (k *kernel) exitStatus() string {
	select {
	case <-k.exited:
		return k.state.String()
	default:
		return ""
	}
}

func (l *launcher) mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create kernel dir: %w", err)
	}
	return l.chown(dir)
}

// chown gives what the kernel must read or write to the kernel's user.
func (l *launcher) chown(path string) error {
	if l.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(l.cred.Uid), int(l.cred.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}
