package interpreter

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// The state bash_kernel's ^C leaves when it lands between a job's fork
// and the job's taking of the terminal: bash has the SIGINT, the job in
// front does not, and bash waits the job out (measured in a bare pty: 48
// of 150 "echo go; sleep 30" interrupted at "go" ran on; CI saw it once
// through bash_kernel). Here bash alone gets the SIGINT, as in that
// window; the control shows the job running on, then the kernel's second
// SIGINT to the job in front (interruptForeground) ends it.
func TestInterruptForegroundEndsTheJobBashWaitsFor(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal(err)
	}
	bash := exec.Command("bash", "--norc", "--noprofile", "-i")
	tty, err := pty.Start(bash) // a session of its own, the pty its terminal
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bash.Process.Kill(); bash.Wait(); tty.Close() })
	go func() { // keep the pty drained
		b := make([]byte, 4096)
		for {
			if _, err := tty.Read(b); err != nil {
				return
			}
		}
	}()
	tty.WriteString("sleep 30; echo after\n")

	var job int
	for deadline := time.Now().Add(10 * time.Second); job == 0; {
		if time.Now().After(deadline) {
			t.Fatal("sleep never came to the front of bash's terminal")
		}
		for _, pg := range foregroundJobs(os.Getpid()) {
			if pg != bash.Process.Pid {
				job = pg
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	running := func() bool { return syscall.Kill(-job, 0) == nil }

	syscall.Kill(bash.Process.Pid, syscall.SIGINT) // bash alone, as in the window
	time.Sleep(time.Second)
	if !running() {
		t.Fatal("control: the job ended of bash's SIGINT alone; the window is not reproduced")
	}

	self, _ := os.FindProcess(os.Getpid())
	k := &kernel{cmd: &exec.Cmd{Process: self}}
	if !slices.Contains(foregroundJobs(os.Getpid()), job) {
		t.Fatalf("foregroundJobs %v lacks the job %d", foregroundJobs(os.Getpid()), job)
	}
	k.interruptForeground()
	for deadline := time.Now().Add(10 * time.Second); running(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job in front still runs 10 s after its SIGINT")
		}
	}
}
