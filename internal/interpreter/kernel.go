package interpreter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// launcher starts kernels: everything a kernel process needs that is the
// same for all of them.
type launcher struct {
	python     string // interpreter with ipykernel (and bash_kernel) installed
	deno       string // deno, for javascript and typescript ("": none)
	r          string // R with IRkernel, for r ("": none)
	java       string // java (a JDK's), for JJava
	jjava      string // JJava's jar, for java ("": none)
	runDir     string // per-kernel directories (sockets, connection file)
	ipythonDir string // IPYTHONDIR: the profile holding our startup file
	env        []string
	cred       *syscall.Credential // nil: run as the server's user
	addrSpace  uint64              // RLIMIT_AS per kernel; 0: none
	quick      bool                // quick flushes (below), unless Config.PlainKernels
	maxFrame   int64               // no kernel message is held past it (frameLimit); 0: none
	maxOutput  int64               // output kept per execution (Config.MaxOutputBytes); <= 0: no limit
	startLimit time.Duration
	log        *slog.Logger
	pickPorts  func() (jupyter.ConnInfo, error) // a test's; nil: jupyter.NewTCP on loopback
}

// bootstrap starts a Python kernel as `python -m MODULE` would (MODULE
// its third argument: ipykernel_launcher, bash_kernel), after setting
// RLIMIT_AS (soft and hard: the kernel's user cannot raise it again) to
// its first argument unless that is 0, and giving the kernel's PUB or
// XPUB socket (IOPub) a deeper queue than ZeroMQ's default of 1000
// messages, past which it drops output silently while we are slow to read
// (a flood of flushed prints on a busy machine). Its depth is the second
// argument. For bash_kernel it also drops pexpect's 50 ms pause before
// each write to bash (for programs that turn echo off after their prompt,
// which readline does not need): bash_kernel writes twice per cell (the
// cell, then `echo $?`), so the pause alone was 100 ms of every bash cell.
// It also runs the bash hook (hooks/bash_kernel.py, from the environment),
// which reads a cell's output in one pass and bounds it.
// With quick flushes it also makes a flush of stdout or stderr with
// nothing written since the last one return at once (see below).
// A kernel that dies of a fatal signal writes its Python threads' stacks
// to the server's log (faulthandler, on a copy of the stderr the server
// reads: ipykernel sends fd 2 itself to the cell's output, which a dying
// kernel never flushes).
const bootstrap = `import faulthandler, os, resource, runpy, sys, threading
n, hwm, quick, module = int(sys.argv.pop(1)), int(sys.argv.pop(1)), sys.argv.pop(1) == "1", sys.argv.pop(1)
if n:
    resource.setrlimit(resource.RLIMIT_AS, (n, n))
faulthandler.enable(open(os.dup(2), "w"))
import zmq
_socket = zmq.Context.socket
def _space_socket(self, socket_type, *args, **kwargs):
    s = _socket(self, socket_type, *args, **kwargs)
    if socket_type in (zmq.PUB, zmq.XPUB):
        s.setsockopt(zmq.SNDHWM, hwm)
    return s
zmq.Context.socket = _space_socket
if module == "bash_kernel":
    import pexpect
    _spawn = pexpect.spawn.__init__
    def _space_spawn(self, *args, **kwargs):
        _spawn(self, *args, **kwargs)
        self.delaybeforesend = None
    pexpect.spawn.__init__ = _space_spawn
    exec(compile(os.environ.pop("SPACE_BASH_HOOK"), "space_bash_hook", "exec"))
if quick:
    from ipykernel import iostream
    _flush, _send = iostream.OutStream.flush, iostream.OutStream._flush
    def _space_send(self):
        self._space_sending = True
        try:
            _send(self)
        finally:
            self._space_sending = False
    def _space_flush(self):
        t = self.pub_thread
        if (getattr(self, "_buffers", True) or getattr(self, "_space_sending", False) or self.echo is not None
                or t is None or t.thread is None or t.thread.ident == threading.get_ident()):
            return _flush(self)
    iostream.OutStream._flush = _space_send
    iostream.OutStream.flush = _space_flush
runpy.run_module(module, run_name="__main__", alter_sys=True)`

// Quick flushes: per-cell costs of ipykernel that this server does not
// need, dropped in Python kernels (not bash_kernel's) unless
// Config.PlainKernels keeps them (a benchmark's anchor). Measured in
// gVisor, where every hand-off between a kernel's threads is a wake-up of
// 150-220 us on an idle machine and far more on a busy one
// (docs/code-interpreter.md, Numbers):
//
//   - ipykernel flushes stdout and stderr twice per cell (around the
//     displayhook and before the reply), and each flush, even of nothing,
//     is a round trip to its IOPub thread (two wake-ups). A flush with
//     nothing written since the last one and no send of the IOPub
//     thread's own under way has nothing to send, so it returns at once.
//     The second condition matters: the thread's timed flush takes the
//     buffers first and queues their message only once it is packed (a
//     32 MiB one takes a while), and a flush that returned in between let
//     what came after it overtake the text (the red team's Python print
//     flood once got its truncation marker first, and so no text at all).
//   - it sleeps 0.5 ms before each reply so that IOPub output reaches
//     clients that stop at the reply; this server waits for the kernel's
//     idle status on IOPub, which comes after all of it, so the sleep is
//     dropped (Kernel._execute_sleep).

// iopubQueue is the kernel's IOPub queue, in messages (each a few hundred
// bytes to the output limit; RLIMIT_AS bounds what a stalled reader can
// make the kernel hold).
const iopubQueue = 100000

// kernel is one running kernel process and our connection to it.
type kernel struct {
	kind   kernelKind
	cmd    *exec.Cmd
	client *jupyter.Client
	dir    string
	exited chan struct{} // closed once the process has been waited for
	state  *os.ProcessState
	ended  atomic.Int32 // an endReason: why we killed it, if we did
	oom    atomic.Bool  // its stderr said an allocation failed for good (oom.go), or the memory guard killed it
	memory uint64       // its memory limit (the launcher's addrSpace; Deno's heap is made from it); 0: none
}

// portAttempts is how many times a kernel that listens on TCP starts,
// each on fresh ports, while another process takes one of its ports
// first: the ports are free when picked, but the kernel binds them only
// once it runs (a JVM: a second or more on a busy machine), and any
// socket the host opens meanwhile may get one as its ephemeral port. CI
// saw JJava exit so; taken later in its start, JJava hangs instead.
const portAttempts = 3

// errPortTaken is a kernel's start that failed on a taken port.
var errPortTaken = errors.New("another process took a port in the kernel's connection file before the kernel bound it")

// start launches a kernel of kind in cwd and returns it once it
// answers. A kernel that fails to come up is killed and its directory
// removed.
func (l *launcher) start(ctx context.Context, id, cwd string, kind kernelKind) (*kernel, error) {
	ctx, cancel := context.WithTimeout(ctx, l.startLimit)
	defer cancel()
	for attempt := 1; ; attempt++ {
		k, err := l.startOnce(ctx, id, cwd, kind)
		if err == nil {
			return k, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return nil, err
		}
		l.log.Info("a port of the kernel's was taken; starting it again on other ports", "kernel", id, "attempt", attempt)
	}
}

// startOnce is one try of start.
func (l *launcher) startOnce(ctx context.Context, id, cwd string, kind kernelKind) (_ *kernel, err error) {
	dir := filepath.Join(l.runDir, id+"-"+jupyter.NewID()[:8])
	if err := l.mkdir(dir); err != nil {
		return nil, err
	}
	k := &kernel{kind: kind, dir: dir, exited: make(chan struct{}), memory: l.addrSpace}
	defer func() {
		if err != nil {
			k.kill()
		}
	}()
	info := jupyter.NewIPC(filepath.Join(dir, "k"))
	out := &lineLogger{log: l.log.With("kernel", id), oom: &k.oom}
	if kind.tcpOnly() {
		if info, err = l.tcpPorts(); err != nil {
			return k, err
		}
		out.portTaken = make(chan struct{})
	}
	info.KernelName = kind.kernelName()
	connFile := filepath.Join(dir, "connection.json")
	if err := info.WriteFile(connFile); err != nil {
		return k, err
	}
	if err := l.chown(connFile); err != nil {
		return k, err
	}

	name, args, env := l.command(kind, connFile)
	k.cmd = exec.Command(name, args...)
	k.cmd.Dir = cwd
	k.cmd.Env = append(append(slices.Clip(l.env), env...), "JPY_PARENT_PID="+strconv.Itoa(os.Getpid()))
	// Its own process group: an interrupt reaches the processes the cell
	// started too, and a kill leaves nothing behind. SIGKILL when the
	// server dies: ipykernel would exit by itself (it watches
	// JPY_PARENT_PID), Deno's kernel would run on.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: l.cred, Pdeathsig: syscall.SIGKILL}
	k.cmd.Stdout, k.cmd.Stderr = out, out
	if err := k.cmd.Start(); err != nil {
		if l.cred != nil && errors.Is(err, fs.ErrPermission) && !canEnter(cwd, l.cred) {
			return k, &cwdError{cwd: cwd}
		}
		return k, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		_ = k.cmd.Wait()
		k.state = k.cmd.ProcessState
		close(k.exited)
	}()
	// What follows gives up as soon as the kernel exits or says one of
	// its ports was taken (it may then hang instead of exiting: JJava
	// does, and a port that another process took accepts our dial and
	// never greets).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-k.exited:
			cancel(errKernelExited)
		case <-out.portTaken:
			cancel(errPortTaken)
		case <-ctx.Done():
		}
	}()
	if err := l.connect(ctx, k, info, id); err != nil {
		return k, startError(err, k, out)
	}
	if hook := l.outputHook(kind); hook != "" {
		if err := runSilent(ctx, k, hook); err != nil {
			return k, startError(fmt.Errorf("%s output hook: %w", kind.kernelName(), err), k, out)
		}
	}
	return k, nil
}

// connect waits for the kernel to listen, dials it and waits for its
// answer.
func (l *launcher) connect(ctx context.Context, k *kernel, info jupyter.ConnInfo, id string) error {
	if err := waitForSockets(ctx, info); err != nil {
		return err
	}
	c, err := jupyter.Dial(ctx, info, l.maxFrame, l.log.With("kernel", id))
	if err != nil {
		return fmt.Errorf("connect to kernel: %w", err)
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
		return fmt.Errorf("wait for kernel: %w", err)
	}
	return nil
}

// startError is why a kernel's start failed with err: a port of its was
// taken (errPortTaken, which start tries again), it exited (with its
// status and the last line it wrote), or err. The kernel's end may reach
// us first as err (a connection it reset as it exited), before its exit
// and last words do: they get exitGrace to come.
func startError(err error, k *kernel, out *lineLogger) error {
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	select {
	case <-out.portTaken:
		return errPortTaken
	case <-k.exited:
		select {
		case <-out.portTaken:
			return errPortTaken
		default:
		}
		return fmt.Errorf("%w (%s): %s", errKernelExited, k.state, out.lastLine())
	case <-t.C:
		return err
	}
}

// exitGrace is how long a kernel whose start failed has to show why.
const exitGrace = 2 * time.Second

// outputHook is the silent cell a kernel of kind runs once it answers,
// which bounds each execution's output in the kernel under the server's
// output limit ("": none). Python's bound is its startup file and bash's
// is run by its bootstrap; Deno, IRkernel and JJava have no startup file
// of ours, so theirs is a cell: hooks/deno.js (with the output fence,
// denofence.go), hooks/irkernel.R and hooks/jjava.jsh (rjava.go).
func (l *launcher) outputHook(kind kernelKind) string {
	if l.maxOutput <= 0 {
		return ""
	}
	switch kind {
	case denoKernel:
		return denoHook(l.maxOutput)
	case rKernel:
		return rHook(l.maxOutput)
	case javaKernel:
		return javaHook(l.maxOutput)
	}
	return ""
}

// tcpPorts is the connection of a kernel that listens on TCP: five free
// ports on loopback.
func (l *launcher) tcpPorts() (jupyter.ConnInfo, error) {
	if l.pickPorts != nil {
		return l.pickPorts()
	}
	return jupyter.NewTCP("127.0.0.1")
}

// errKernelExited is a kernel that exited before it listened.
var errKernelExited = errors.New("kernel exited while starting")

// waitForSockets waits until the kernel listens (ZeroMQ cannot dial a
// unix socket before it exists, and gives up on a refused TCP port).
func waitForSockets(ctx context.Context, info jupyter.ConnInfo) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := info.Listening()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != ctx.Err() {
				return cause
			}
			return fmt.Errorf("kernel did not listen on %s: %w", info.Endpoint(info.ShellPort), ctx.Err())
		case <-t.C:
		}
	}
}

// interrupt interrupts the running cell. Python kernels get SIGINT on
// their process group, as jupyter_client does for kernels with the
// "signal" interrupt mode: ipykernel turns it into KeyboardInterrupt in
// the cell, bash_kernel into ^C on bash's terminal, IRkernel into an
// aborted cell. Deno's kernel and JJava's JVM die of SIGINT; they take an
// interrupt_request on the control channel instead (their "message"
// mode), which for Deno stops a busy loop but not an await, and for JJava
// stops the snippet's thread.
func (k *kernel) interrupt() error {
	if k.cmd == nil || k.cmd.Process == nil {
		return errors.New("kernel not started")
	}
	if k.kind.interruptByMessage() {
		r, err := k.client.Request(jupyter.Control, "interrupt_request", struct{}{}, nil)
		if err != nil {
			return fmt.Errorf("interrupt kernel: %w", err)
		}
		r.Close() // its reply says nothing the cell's messages do not
		return nil
	}
	if err := syscall.Kill(-k.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupt kernel: %w", err)
	}
	return nil
}

// interruptForeground sends SIGINT to the job in front on the terminal
// of bash_kernel's bash. bash hands its terminal to a job between the
// job's fork and its exec; the ^C that bash_kernel sends in that window
// reaches bash alone, which then waits for the job as if nothing came
// (measured in a bare pty: 48 of 150 "echo go; sleep 30" cells
// interrupted at "go" ran on). A second SIGINT to the job ends it.
func (k *kernel) interruptForeground() {
	if k.cmd == nil || k.cmd.Process == nil {
		return
	}
	for _, pgid := range foregroundJobs(k.cmd.Process.Pid) {
		_ = syscall.Kill(-pgid, syscall.SIGINT)
	}
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
//
// Processes in a session of their own that the kernel started go too:
// bash_kernel's bash runs on a pty, so in a new session (and so does
// anything a cell starts with setsid). Its jobs are not in the kernel's
// process group, and one that ignores SIGHUP (nohup) would outlive bash.
func (k *kernel) kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		sessions := k.killGroup()
		<-k.exited
		killSessions(sessions)
	}
	if k.client != nil {
		k.client.Close(nil)
	}
	_ = os.RemoveAll(k.dir)
}

// killForMemory ends the kernel and what its cells started as an OOM
// killer would (memguard.go): SIGKILL, and the kernel is marked as out of
// memory, so the running cell says so. Its context starts a new kernel
// with the next cell, as after any death.
func (k *kernel) killForMemory() {
	if k.cmd == nil || k.cmd.Process == nil {
		return
	}
	k.oom.Store(true)
	killSessions(k.killGroup())
}

// killGroup sends SIGKILL to the kernel's process group and returns the
// sessions its children led before (bash_kernel's bash, setsid jobs),
// which the group's kill does not reach: the caller kills them with
// killSessions.
func (k *kernel) killGroup() []int {
	pid := k.cmd.Process.Pid
	sessions := childSessions(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return sessions
}

// exitStatus describes how the process ended ("" while it runs): with
// its resident peak and its memory limit when it died of a signal, which
// say whether memory was the likely cause.
func (k *kernel) exitStatus() string {
	select {
	case <-k.exited:
	default:
		return ""
	}
	ws, ok := k.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || k.memory == 0 {
		return k.state.String()
	}
	return fmt.Sprintf("%s, at %d MiB resident of its %d MiB memory limit", k.state, k.maxRSS()>>20, k.memory>>20)
}

// maxRSS is the ended process's resident peak in bytes (0: unknown).
func (k *kernel) maxRSS() uint64 {
	if ru, ok := k.state.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 0 {
		return uint64(ru.Maxrss) << 10 // KiB on Linux
	}
	return 0
}

// outOfMemory reports whether the process ended for want of memory
// (oom.go); false while it runs.
func (k *kernel) outOfMemory() bool {
	select {
	case <-k.exited:
		ws, ok := k.state.Sys().(syscall.WaitStatus)
		return ok && ranOutOfMemory(ws, k.oom.Load(), k.maxRSS(), k.memory)
	default:
		return false
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

// cwdError is a context's directory its kernel's user may not enter: the
// caller's mistake (a 400), not the server's.
type cwdError struct{ cwd string }

func (e *cwdError) Error() string {
	return fmt.Sprintf("cwd %s: the kernels' user may not enter it (permission denied)", e.cwd)
}

// canEnter reports whether cred may reach and enter dir: search rights
// on it and on every directory above it, by their mode bits alone (the
// server runs as root, so access(2) would answer for root).
func canEnter(dir string, cred *syscall.Credential) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if !canSearch(d, cred) {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

func canSearch(dir string, cred *syscall.Credential) bool {
	if cred.Uid == 0 {
		return true
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	mode := uint32(fi.Mode().Perm())
	switch {
	case st.Uid == cred.Uid:
		return mode&0o100 != 0
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}
