package process

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// startMu is held for reading while a child is forked and registered, and
// for writing by the orphan reaper while it decides whether a zombie is one
// of ours.
var startMu sync.RWMutex

// ReapOrphans reaps zombies that are not the manager's own processes until
// ctx ends. As PID 1 of a sandbox the agent inherits every orphan; its own
// processes are left to os/exec, whose Wait needs their exit status. (The
// agent used to re-execute itself under a separate init for this; doing it
// in one process saves a second Go start, ~35 ms of every cold create.)
func (m *Manager) ReapOrphans(ctx context.Context) {
	m.reaping.Store(true)
	defer m.reaping.Store(false)
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second) // a managed zombie may hide orphans until its Wait runs
	defer tick.Stop()
	for {
		m.reapOrphans()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

// reapAfterWait reaps, when the manager reaps orphans, those that one of
// its processes hid: reapOrphans stops at the first exited child it finds
// (waitid answers one), and while that is a process of ours whose Wait has
// not run, an orphan that died at the same moment stays a zombie until
// the next SIGCHLD or tick, up to a second. Called once os/exec has
// reaped ours and before its end is told, so that a client whose command
// killed a background process (the E2B Desktop SDK's `pkill x11vnc`, then
// `pgrep -x x11vnc` at the stream's next start) does not find its zombie.
func (m *Manager) reapAfterWait() {
	if m.reaping.Load() {
		m.reapOrphans()
	}
}

func (m *Manager) reapOrphans() {
	for {
		startMu.Lock()
		pid, err := waitablePID()
		if err != nil || pid <= 0 || m.owns(pid) {
			startMu.Unlock()
			return
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		startMu.Unlock()
		m.log.Debug("reaped orphan", "pid", pid)
	}
}

// waitablePID returns a child that has exited, without reaping it (0 when
// none has).
func waitablePID() (int, error) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return 0, err
	}
	// si_pid follows si_signo, si_errno, si_code and the union's alignment
	// padding: offset 16 on 64-bit Linux (x/sys/unix keeps the union opaque).
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 16))), nil
}

// owns reports whether pid is a process of the manager that os/exec has not
// waited for yet.
func (m *Manager) owns(pid int) bool {
	m.mu.Lock()
	p, ok := m.procs[uint32(pid)]
	m.mu.Unlock()
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}
