// Package process starts and tracks the processes of a sandbox: their output
// buffers, PTYs, stdin, signals and lifetimes. It serves envd's process.Process
// service and gives the native Agent service its Exec and Attach.
package process

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/agent/spawner"
	"github.com/spacesandbox/space/internal/agent/users"
)

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	// BufferBytes bounds the data kept per process for reconnects (4 MiB).
	BufferBytes int
	// ExitedTTL is how long an exited process stays reachable (10 min).
	ExitedTTL time.Duration
	// MaxExited bounds the exited processes kept (512).
	MaxExited int
	Logger    *slog.Logger
	// Spawner starts the processes (nil: os/exec).
	Spawner *spawner.Spawner
}

// Manager is the registry of processes.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	procs  map[uint32]*Proc
	exited []*Proc // in the order they exited
	// keys are the idempotency keys of reachable processes (Spec.Key).
	keys map[string]keyedProc
	// keyed serialises starts that carry a key, so that two with the same
	// key cannot both start.
	keyed sync.Mutex
	// reaping is set while ReapOrphans runs (the agent is PID 1).
	reaping atomic.Bool
}

// NewManager returns an empty registry.
func NewManager(opts Options) *Manager {
	if opts.BufferBytes <= 0 {
		opts.BufferBytes = 4 << 20
	}
	if opts.ExitedTTL <= 0 {
		opts.ExitedTTL = 10 * time.Minute
	}
	if opts.MaxExited <= 0 {
		opts.MaxExited = 512
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, log: log, procs: map[uint32]*Proc{}, keys: map[string]keyedProc{}}
}

// Spec is a fully resolved process to start.
type Spec struct {
	Config *process.ProcessConfig
	// PTY, when set, runs the process on a terminal of that size.
	PTY   *process.PTY_Size
	Tag   *string
	Stdin bool
	User  *users.User
	// Env is the complete environment, "K=V" entries.
	Env []string
	Dir string
	// Timeout kills the process group after this long; 0 means never.
	Timeout time.Duration
	// Hidden keeps the process out of the registry: no caller can find,
	// list, signal or attach to it (the agent's own warm-up).
	Hidden bool
	// Key is the caller's idempotency key for StartOnce ("": none): a
	// client that lost its answer can start again without running the
	// command twice. Start ignores it.
	Key string
}

// StartOnce starts a process as Start does, unless spec.Key is the key of
// a process still reachable: then it starts nothing and returns that one,
// replayed true. The same key with another command is ErrExists.
func (m *Manager) StartOnce(spec Spec) (p *Proc, replayed bool, err error) {
	if spec.Key == "" || spec.Hidden {
		p, err = m.Start(spec)
		return p, false, err
	}
	sum := spec.sum()
	m.keyed.Lock()
	defer m.keyed.Unlock()
	m.mu.Lock()
	m.pruneLocked(time.Now())
	k, ok := m.keys[spec.Key]
	m.mu.Unlock()
	if ok && k.sum != sum {
		return nil, false, fmt.Errorf("%w: idempotency key %q was given to another command (pid %d)", ErrExists, spec.Key, k.p.pid)
	}
	if ok {
		return k.p, true, nil
	}
	if p, err = m.Start(spec); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	if m.procs[p.pid] == p { // not ended and pruned meanwhile
		m.keys[spec.Key], p.key = keyedProc{p: p, sum: sum}, spec.Key
	}
	m.mu.Unlock()
	return p, false, nil
}

// keyedProc is the process an idempotency key started, with the sum of
// the spec it was started with.
type keyedProc struct {
	p   *Proc
	sum [sha256.Size]byte
}

// sum identifies what a spec would run: the same command, arguments,
// environment, directory, user, terminal, stdin and timeout.
func (s Spec) sum() [sha256.Size]byte {
	cfg, _ := proto.MarshalOptions{Deterministic: true}.Marshal(s.Config)
	h := sha256.New()
	tag := "<none>"
	if s.Tag != nil {
		tag = strconv.Quote(*s.Tag)
	}
	fmt.Fprintf(h, "%q %s %v %v %v %v %q %q %d\n", cfg, tag, s.PTY != nil, s.PTY.GetCols(), s.PTY.GetRows(), s.Stdin, userName(s.User), s.Dir, s.Timeout)
	for _, kv := range s.Env {
		fmt.Fprintf(h, "%q\n", kv)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// Start starts a process; its start event is buffered before Start returns.
func (m *Manager) Start(spec Spec) (*Proc, error) {
	path, err := lookPath(spec.Config.GetCmd(), envValue(spec.Env, "PATH"))
	if err != nil {
		return nil, err
	}
	attr := spawner.Attr{
		Path: path,
		Args: append([]string{spec.Config.GetCmd()}, spec.Config.GetArgs()...),
		Env:  spec.Env,
		Dir:  spec.Dir,
	}
	if os.Getuid() == 0 && spec.User != nil {
		attr.Cred = &syscall.Credential{Uid: spec.User.UID, Gid: spec.User.GID, Groups: spec.User.Groups}
	} else if spec.User != nil && spec.User.UID != uint32(os.Getuid()) {
		return nil, fmt.Errorf("%w: cannot run as %s without root", ErrInvalid, spec.User.Name)
	}

	p := &Proc{tag: spec.Tag, config: spec.Config, buf: newBuffer(m.opts.BufferBytes), done: make(chan struct{}), hidden: spec.Hidden}
	var readers []*os.File
	var pumps sync.WaitGroup
	// Between the fork and the registration the child is not yet known as
	// ours; the orphan reaper must not take its exit status meanwhile.
	startMu.RLock()
	if spec.PTY != nil {
		master, err := m.startPTY(attr, spec, p)
		if err != nil {
			startMu.RUnlock()
			return nil, err
		}
		p.pty = master
		readers = []*os.File{master}
		p.register(m)
		startMu.RUnlock()
		pumps.Add(1)
		go func() { defer pumps.Done(); p.pump(master, ptyData) }()
	} else {
		files, err := m.startPipes(attr, spec, p)
		if err != nil {
			startMu.RUnlock()
			return nil, err
		}
		readers = files
		p.register(m)
		startMu.RUnlock()
		pumps.Add(2)
		go func() { defer pumps.Done(); p.pump(files[0], stdoutData) }()
		go func() { defer pumps.Done(); p.pump(files[1], stderrData) }()
	}
	if spec.Timeout > 0 {
		p.mu.Lock()
		p.kill = time.AfterFunc(spec.Timeout, func() { _ = p.Signal(syscall.SIGKILL) })
		p.mu.Unlock()
	}
	if !p.hidden {
		// envd's line (its env values are never logged).
		m.log.Info(fmt.Sprintf("Process with pid %d started", p.pid), "event_type", "process_start", "pid", p.pid,
			"command", commandLine(spec.Config), "user", userName(spec.User), "pty", spec.PTY != nil)
	}
	go p.wait(readers, &pumps, m.reapAfterWait, m.exitedProc)
	return p, nil
}

// register buffers the start event and makes the process reachable.
func (p *Proc) register(m *Manager) {
	p.pid = uint32(p.process.Pid)
	p.buf.add(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: p.pid}}}, 0)
	if p.hidden {
		return
	}
	m.mu.Lock()
	m.procs[p.pid] = p
	m.mu.Unlock()
}

func (m *Manager) startPipes(attr spawner.Attr, spec Spec, p *Proc) ([]*os.File, error) {
	attr.Setpgid = true
	outR, outW, err := pipe(true)
	if err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := pipe(true)
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	attr.Files[1], attr.Files[2] = outW, errW
	var inR, inW *os.File
	if spec.Stdin {
		if inW, inR, err = pipe(false); err != nil {
			closeAll(outR, outW, errR, errW)
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		attr.Files[0] = inR
	} else if attr.Files[0], err = devNull(); err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, err
	}
	if p.process, err = m.opts.Spawner.Start(attr); err != nil {
		closeAll(outR, outW, errR, errW, inR, inW)
		return nil, startError(spec.Config.GetCmd(), err)
	}
	closeAll(outW, errW, inR)
	if inW != nil {
		p.stdin = inW
	}
	return []*os.File{outR, errR}, nil
}

// pipe makes a pipe whose end in the agent (the read end when parentReads)
// is non-blocking and served by Go's poller, and whose end for the child is
// a plain blocking file. os.Pipe registers both ends with the poller and
// exec then makes the child's end blocking again: about twice the
// syscalls, and inside gVisor each one is a round trip to the sentry.
func pipe(parentReads bool) (parent, child *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	mine, theirs := fds[0], fds[1]
	if !parentReads {
		mine, theirs = fds[1], fds[0]
	}
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(mine), "|0"), os.NewFile(uintptr(theirs), "|1"), nil
}

var devNullFile struct {
	once sync.Once
	f    *os.File
	err  error
}

// devNull is the stdin of processes started without one, opened once
// (os/exec would open it for every process).
func devNull() (*os.File, error) {
	devNullFile.once.Do(func() {
		devNullFile.f, devNullFile.err = os.Open(os.DevNull)
	})
	if devNullFile.err != nil {
		return nil, fmt.Errorf("open %s: %w", os.DevNull, devNullFile.err)
	}
	return devNullFile.f, nil
}

func (m *Manager) startPTY(attr spawner.Attr, spec Spec, p *Proc) (*os.File, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	defer tty.Close()
	if spec.User != nil && os.Getuid() == 0 {
		_ = tty.Chown(int(spec.User.UID), int(spec.User.GID)) // best effort: lets the user reopen its tty
	}
	size := &pty.Winsize{Cols: uint16(spec.PTY.GetCols()), Rows: uint16(spec.PTY.GetRows())}
	if size.Cols == 0 || size.Rows == 0 {
		size.Cols, size.Rows = 80, 24
	}
	if err := pty.Setsize(master, size); err != nil {
		master.Close()
		return nil, fmt.Errorf("set pty size: %w", err)
	}
	attr.Files = [3]*os.File{tty, tty, tty}
	attr.Setsid = true
	attr.Setctty = true // on the child's fd 0
	if p.process, err = m.opts.Spawner.Start(attr); err != nil {
		master.Close()
		return nil, startError(spec.Config.GetCmd(), err)
	}
	return master, nil
}

func stdoutData(b []byte) *process.ProcessEvent_DataEvent {
	return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: b}}
}

func stderrData(b []byte) *process.ProcessEvent_DataEvent {
	return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: b}}
}

func ptyData(b []byte) *process.ProcessEvent_DataEvent {
	return &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: b}}
}

// exitedProc records p as exited and evicts what is too old or too many.
func (m *Manager) exitedProc(p *Proc) {
	if p.hidden {
		return
	}
	end := p.endEvent()
	attrs := []any{"event_type", "process_end", "pid", p.pid, "exit_code", end.GetExitCode(), "exited", end.GetExited(), "status", end.GetStatus()}
	if end.Error != nil {
		attrs = append(attrs, "error", end.GetError())
	}
	m.log.Info(fmt.Sprintf("Process with pid %d ended", p.pid), attrs...)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exited = append(m.exited, p)
	m.pruneLocked(time.Now())
}

func (m *Manager) pruneLocked(now time.Time) {
	drop := 0
	for drop < len(m.exited) {
		p := m.exited[drop]
		if len(m.exited)-drop <= m.opts.MaxExited && now.Sub(p.endedAt) < m.opts.ExitedTTL {
			break
		}
		if m.procs[p.pid] == p {
			delete(m.procs, p.pid)
		}
		if p.key != "" && m.keys[p.key].p == p {
			delete(m.keys, p.key)
		}
		drop++
	}
	if drop > 0 {
		m.exited = append(m.exited[:0:0], m.exited[drop:]...)
	}
}

// Get finds a process by pid or tag.
func (m *Manager) Get(sel *process.ProcessSelector) (*Proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(time.Now())
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p, ok := m.procs[s.Pid]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("%w: process with pid %d not found", ErrNotFound, s.Pid)
	case *process.ProcessSelector_Tag:
		var best *Proc
		for _, p := range m.procs {
			if p.tag == nil || *p.tag != s.Tag {
				continue
			}
			// Prefer a running process, then the most recent one.
			if best == nil || (p.Running() && !best.Running()) || (p.Running() == best.Running() && p.pid > best.pid) {
				best = p
			}
		}
		if best == nil {
			return nil, fmt.Errorf("%w: process with tag %s not found", ErrNotFound, s.Tag)
		}
		return best, nil
	default:
		return nil, fmt.Errorf("%w: process selector is required", ErrInvalid)
	}
}

// List returns the running processes ordered by pid.
func (m *Manager) List() []*Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Proc
	for _, p := range m.procs {
		if p.Running() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// lookPath finds cmd in pathEnv (the child's PATH) when it has no slash.
func lookPath(cmd, pathEnv string) (string, error) {
	if cmd == "" {
		return "", fmt.Errorf("%w: cmd is required", ErrInvalid)
	}
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(cmd); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: executable %q not found in PATH", ErrInvalid, cmd)
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

func userName(u *users.User) string {
	if u == nil {
		return ""
	}
	return u.Name
}

// startError classifies a failed start: a program that does not exist or
// cannot be executed is the caller's mistake (invalid argument), not the
// agent's failure.
func startError(cmd string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.EACCES) ||
		errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: cannot run %s: %v", ErrInvalid, cmd, err)
	}
	return fmt.Errorf("start %s: %w", cmd, err)
}

// commandLine is a process's command as envd logs it: the command and its
// arguments joined by spaces, at most 1 KiB.
func commandLine(c *process.ProcessConfig) string {
	s := strings.Join(append([]string{c.GetCmd()}, c.GetArgs()...), " ")
	if len(s) > 1024 {
		s = s[:1024] + "..."
	}
	return s
}
