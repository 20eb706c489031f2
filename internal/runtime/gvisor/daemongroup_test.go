package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestPlaceInDaemonGroup: a process placed in the daemon's CPU group is in
// it with all its threads, at the group's share, and its children start
// there. The control: the same process was elsewhere before.
func TestPlaceInDaemonGroup(t *testing.T) {
	testenv.NeedRoot(t, "moving a process between cgroups")
	// A shell whose child starts only once the shell has been moved.
	sh := exec.Command("sh", "-c", "read go; sleep 60 & echo $!; wait")
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })

	g, err := daemonGroupOf()
	if err != nil {
		t.Fatal(err)
	}
	const rel = "/space/spaced"
	if got := cpuCgroupOf(t, sh.Process.Pid); got == rel {
		t.Fatalf("control: the shell is in %s before it was placed", got)
	}

	dir, err := PlaceInDaemonGroup(sh.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if got := cpuCgroupOf(t, sh.Process.Pid); got != rel {
		t.Errorf("the placed shell is in CPU cgroup %s, want %s", got, rel)
	}
	// A waking sandbox's share: 8 times a sandbox's.
	want := map[string]string{"cpu.shares": "8192", "cpu.weight": "800"}[g.file]
	if raw, err := os.ReadFile(filepath.Join(dir, g.file)); err != nil || strings.TrimSpace(string(raw)) != want {
		t.Errorf("%s of %s: %q (%v), want %s", g.file, dir, raw, err, want)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 32)
	n, err := out.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("child pid %q: %v", line[:n], err)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if got := cpuCgroupOf(t, child); got != rel {
		t.Errorf("the placed shell's child is in CPU cgroup %s, want %s", got, rel)
	}
}

// cpuCgroupOf is the CPU cgroup of process pid, as /proc says it (v1: the
// cpu hierarchy's line, v2: the unified one's).
func cpuCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2]
			}
		}
		if parts[0] == "0" {
			unified = parts[2]
		}
	}
	return unified
}
