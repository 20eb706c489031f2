package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestRemoveCgroupsWaitsForKilledProcesses: a sandbox's cgroup still
// holds a process that was killed a moment ago and has not yet ended (a
// loaded host); its teardown waits for it to leave instead of failing
// with EBUSY. The control shows the cgroup is busy at first.
func TestRemoveCgroupsWaitsForKilledProcesses(t *testing.T) {
	testenv.NeedRoot(t, "making cgroups")
	id := fmt.Sprintf("rmtest%d", time.Now().UnixNano()%1_000_000_000)
	dir := filepath.Join(cgroupRoot, "pids", cgroupParent, id)
	if !exists(filepath.Join(cgroupRoot, "pids")) {
		dir = filepath.Join(cgroupRoot, cgroupParent, id) // cgroup v2
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Rmdir(dir) })
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	// One goroutine kills and waits for it, 300 ms from now or when the
	// test ends, whichever comes first.
	ended, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-time.After(300 * time.Millisecond):
		case <-stop:
		}
		sleep.Process.Kill()
		sleep.Wait()
	}()
	t.Cleanup(func() { close(stop); <-ended })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(dir); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("control: removing a cgroup with a process in it: %v, want EBUSY", err)
	}
	if err := removeCgroups(context.Background(), id); err != nil {
		t.Fatalf("removeCgroups while its process ends: %v", err)
	}
	if exists(dir) {
		t.Errorf("%s is still there", dir)
	}
}
