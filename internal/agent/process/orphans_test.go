package process

import (
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An orphan that dies while one of the manager's processes is a zombie
// not yet waited for is hidden from the reaper (waitid answers that one,
// and the reaper stops at a process of ours); once ours is waited for,
// reapAfterWait reaps it at once instead of at the next SIGCHLD or tick.
// The test process is made a subreaper so that its grandchild is the
// orphan.
func TestReapAfterWaitReapsHiddenOrphan(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	m := NewManager(Options{Logger: slog.New(slog.DiscardHandler)})
	m.reaping.Store(true)
	// waitid looks at the children of the calling thread first, then of
	// the process's other threads, so which zombie it finds first depends
	// on the threads the runtime used: set up again until the orphan is
	// hidden (the control), at most 20 times.
	for try := range 20 {
		owned, orphan := hiddenOrphan(t, m)
		m.reapOrphans()
		hidden := state(orphan) == "Z"
		var ws unix.WaitStatus
		if _, err := unix.Wait4(owned, &ws, 0, nil); err != nil { // what os/exec's Wait does
			t.Fatal(err)
		}
		m.mu.Lock()
		delete(m.procs, uint32(owned))
		m.mu.Unlock()
		if !hidden {
			continue
		}
		m.reapAfterWait()
		if st := state(orphan); st != "" {
			t.Errorf("the orphan is %q after ours was waited for, want reaped (set-up %d)", st, try+1)
		}
		return
	}
	t.Fatal("control: in 20 set-ups the reap pass never stopped at our zombie with the orphan's behind it")
}

// hiddenOrphan makes a zombie of the manager's own (exited, not waited
// for) and then an orphan zombie, and returns their pids.
func hiddenOrphan(t *testing.T, m *Manager) (owned, orphan int) {
	t.Helper()
	owned, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, owned, "Z")
	m.mu.Lock()
	m.procs[uint32(owned)] = &Proc{pid: uint32(owned), done: make(chan struct{})}
	m.mu.Unlock()
	// The orphan: a background child of a shell that exits at once.
	out, err := exec.Command("/bin/sh", "-c", "sleep 0.05 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	if orphan, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		t.Fatal(err)
	}
	waitState(t, orphan, "Z")
	return owned, orphan
}

// state is pid's state letter in /proc ("": no such process).
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for state(pid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is %q, want %q", pid, state(pid), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
