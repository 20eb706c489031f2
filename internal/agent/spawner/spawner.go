// Package spawner starts the agent's processes. Inside a sandbox it hands
// each start to space-spawn (helper/space-spawn.c), a small static helper
// that the agent runs once: a Go child resets every signal handler of the
// Go runtime before its execve (about 55 system calls, each a trap into
// gVisor's sentry), the helper's child makes six. Without the helper (not
// built into this binary, or it died) a start goes through os/exec, with
// the same attributes and the same errors.
package spawner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Embedded is the helper built into this binary for its architecture
// (bin/$GOARCH/space-spawn, embed_$GOARCH.go), or nil.
func Embedded() []byte {
	data, err := helperFS.ReadFile(helperPath)
	if err != nil {
		return nil
	}
	return data
}

// Attr is what a process is started with. Files are its stdin, stdout and
// stderr; Setctty makes stdin (a terminal) its controlling terminal and
// needs Setsid.
type Attr struct {
	Path    string
	Args    []string
	Env     []string
	Dir     string
	Files   [3]*os.File
	Setpgid bool
	Setsid  bool
	Setctty bool
	Cred    *syscall.Credential
}

// The request's flags and the steps an answer names (space-spawn.c).
const (
	flagSetpgid = 1 << iota
	flagSetsid
	flagSetctty
	flagCred
)

// Bounds of one request (space-spawn.c); a larger one goes through
// os/exec.
const (
	maxMessage = 64 << 10
	maxStrings = 8192
	maxGroups  = 256
)

// answerTimeout bounds the helper's answer: a start takes milliseconds; a
// helper that does not answer (stopped by root inside) is replaced. A
// variable for tests.
var answerTimeout = 10 * time.Second

// errUnavailable means the helper cannot take this start and nothing was
// started: os/exec takes it.
var errUnavailable = errors.New("spawn helper unavailable")

// Spawner starts processes, through the helper when it has one. Its zero
// value (and nil) starts them through os/exec.
type Spawner struct {
	helper []byte
	log    *slog.Logger
	// command, when set, makes the helper's command in place of its
	// sealed executable (a test runs another architecture's helper, from
	// a file, under qemu-user); its fd 3 is added here.
	command func() *exec.Cmd

	mu  sync.Mutex
	exe *os.File // the helper's executable, a sealed memfd
	// sock is the agent's end of the helper's socket, -1 while no helper
	// runs. It stays blocking: a start waits for its answer in one
	// recvmsg, not in a non-blocking read, the poller and a second read
	// (each a trap into gVisor's sentry, and a hand-off between threads
	// on the way back).
	sock int
	proc *os.Process // the running helper
	warn sync.Once   // the first failure is logged, not every start
}

// New returns a Spawner that starts processes through helper (an
// executable, normally Embedded()); with a nil helper it uses os/exec.
func New(helper []byte, log *slog.Logger) *Spawner {
	return &Spawner{helper: helper, log: log, sock: -1}
}

// Start starts a process. The caller waits for it (the helper's child is
// the caller's own, as with os/exec).
func (s *Spawner) Start(a Attr) (*os.Process, error) {
	if s != nil && s.helper != nil {
		p, err := s.startHelped(a)
		if !errors.Is(err, errUnavailable) {
			return p, err
		}
		s.warn.Do(func() { s.log.Warn("starting processes through os/exec", "err", err) })
	}
	cmd := &exec.Cmd{
		Path: a.Path, Args: a.Args, Env: a.Env, Dir: a.Dir,
		Stdin: a.Files[0], Stdout: a.Files[1], Stderr: a.Files[2],
		SysProcAttr: &syscall.SysProcAttr{Setpgid: a.Setpgid, Setsid: a.Setsid, Setctty: a.Setctty, Credential: a.Cred},
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The files are the caller's and os/exec made no goroutine for them:
	// waiting on the process is all its Wait would do.
	return cmd.Process, nil
}

// Close stops the helper.
func (s *Spawner) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	if s.exe != nil {
		s.exe.Close()
		s.exe = nil
	}
}

func (s *Spawner) startHelped(a Attr) (*os.Process, error) {
	msg, err := request(a)
	if err != nil {
		return nil, err
	}
	fds := make([]int, 3)
	for i, f := range a.Files {
		if f == nil {
			return nil, fmt.Errorf("%w: file %d missing", errUnavailable, i)
		}
		fds[i] = int(f.Fd())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A helper that died (killed by root inside) is replaced once: a
	// request it did not take started nothing.
	for try := 0; ; try++ {
		if s.sock < 0 {
			if err := s.runLocked(); err != nil {
				return nil, fmt.Errorf("%w: %w", errUnavailable, err)
			}
		}
		err := ignoringEINTR(func() error { return unix.Sendmsg(s.sock, msg, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL) })
		if err == nil {
			break
		}
		s.stopLocked()
		if try == 1 {
			return nil, fmt.Errorf("%w: send: %w", errUnavailable, err)
		}
	}
	runtime.KeepAlive(a.Files)
	var answer [8]byte
	var n int
	err = ignoringEINTR(func() (err error) {
		n, err = unix.Read(s.sock, answer[:])
		return err
	})
	if err != nil || n != len(answer) {
		// Sent but not answered: the process may have started, so it is
		// not started again.
		s.stopLocked()
		return nil, fmt.Errorf("spawn helper did not answer (read %d bytes): %v", n, err)
	}
	pid := int(int32(binary.LittleEndian.Uint32(answer[0:])))
	if errno := syscall.Errno(binary.LittleEndian.Uint32(answer[4:])); errno != 0 {
		if pid > 0 { // the child failed before its execve and has exited
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
		// os/exec's error, whichever step failed.
		return nil, &fs.PathError{Op: "fork/exec", Path: a.Path, Err: errno}
	}
	return os.FindProcess(pid)
}

// request encodes a for the helper (space-spawn.c), or says it cannot.
func request(a Attr) ([]byte, error) {
	var flags uint32
	if a.Setpgid {
		flags |= flagSetpgid
	}
	if a.Setsid {
		flags |= flagSetsid
	}
	if a.Setctty {
		flags |= flagSetctty
	}
	var uid, gid uint32
	var groups []uint32
	if a.Cred != nil {
		flags |= flagCred
		uid, gid, groups = a.Cred.Uid, a.Cred.Gid, a.Cred.Groups
	}
	env := a.Env
	if env == nil { // os/exec's meaning: this process's environment
		env = os.Environ()
	}
	if len(a.Args) == 0 || len(a.Args) > maxStrings || len(env) > maxStrings || len(groups) > maxGroups {
		return nil, fmt.Errorf("%w: %d arguments, %d variables, %d groups", errUnavailable, len(a.Args), len(env), len(groups))
	}
	msg := make([]byte, 0, 512)
	for _, v := range []uint32{flags, uid, gid, uint32(len(groups)), uint32(len(a.Args)), uint32(len(env))} {
		msg = binary.LittleEndian.AppendUint32(msg, v)
	}
	for _, g := range groups {
		msg = binary.LittleEndian.AppendUint32(msg, g)
	}
	for _, list := range [][]string{{a.Path, a.Dir}, a.Args, env} {
		for _, s := range list {
			if strings.IndexByte(s, 0) >= 0 {
				// os/exec refuses it with its own error.
				return nil, fmt.Errorf("%w: NUL in a string", errUnavailable)
			}
			msg = append(append(msg, s...), 0)
		}
	}
	if len(msg) > maxMessage {
		return nil, fmt.Errorf("%w: request of %d bytes", errUnavailable, len(msg))
	}
	return msg, nil
}

// runLocked starts the helper: its executable is a sealed memfd (nothing
// in the sandbox's file system), its fd 3 one end of a socket pair.
func (s *Spawner) runLocked() error {
	if s.exe == nil {
		exe, err := sealedMemfd("space-spawn", s.helper)
		if err != nil {
			return err
		}
		s.exe = exe
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "space-spawn")
	defer theirs.Close()
	mine := fds[0]
	// A helper that does not answer (stopped by root inside) times the
	// read out, and the send too should its buffer be full: the socket's
	// timeouts bound them.
	tv := unix.NsecToTimeval(answerTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(mine, unix.SOL_SOCKET, opt, &tv); err != nil {
			unix.Close(mine)
			return fmt.Errorf("socket: %w", err)
		}
	}
	cmd := &exec.Cmd{Path: fmt.Sprintf("/proc/self/fd/%d", s.exe.Fd()), Args: []string{"space-spawn"}, Env: []string{}}
	if s.command != nil {
		cmd = s.command()
	}
	cmd.ExtraFiles = []*os.File{theirs}
	if err := cmd.Start(); err != nil {
		unix.Close(mine)
		return fmt.Errorf("start: %w", err)
	}
	s.sock, s.proc = mine, cmd.Process
	return nil
}

// stopLocked ends the helper (it exits when its socket closes) and reaps
// it.
func (s *Spawner) stopLocked() {
	if s.sock < 0 {
		return
	}
	unix.Close(s.sock)
	s.sock = -1
	p := s.proc
	s.proc = nil
	_ = p.Kill()
	go func() { _, _ = p.Wait() }() // an init's orphan reaper may reap it first
}

// ignoringEINTR calls f until it fails with another error than EINTR
// (the Go runtime's preemption signal interrupts a blocking call).
func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// sealedMemfd is an executable memory file holding data, sealed against
// any change.
func sealedMemfd(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd seals: %w", err)
	}
	return f, nil
}
