package gvisor

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/testenv"
)

// The runsc command of an urgent sandbox (a restore someone waits on) runs
// in the restore cgroup at the urgent share; the others stay where spaced
// is. The command here is a sleep: what is checked is where start puts it.
func TestUrgentCommandRunsInRestoreCgroup(t *testing.T) {
	testenv.NeedRoot(t, "moving a process between cgroups")
	r := &Runtime{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	own, err := cpuCgroupOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		prio runtime.Priority
		want string
	}{
		{"urgent", runtime.PriorityUrgent, "/" + cgroupParent + "/" + restoreCgroup},
		{"normal", runtime.PriorityNormal, own},
		{"background", runtime.PriorityBackground, own},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			if err := r.start(cmd, tc.prio); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			got, err := cpuCgroupOf(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("a command started at priority %v is in CPU cgroup %q, want %q", tc.prio, got, tc.want)
			}
		})
	}
	dir, file, want := restoreCgroupShare()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.Atoi(strings.TrimSpace(string(data))); got != want {
		t.Fatalf("the restore cgroup's %s is %d, want %d (the urgent share)", file, got, want)
	}
}

func TestWeightOfShares(t *testing.T) {
	// runsc's own mapping: the ends of the two ranges, the default, urgent.
	for shares, want := range map[int]int{2: 1, 262144: 10000, 1024: 39, urgentShares: 313} {
		if got := weightOfShares(shares); got != want {
			t.Errorf("weightOfShares(%d) = %d, want %d", shares, got, want)
		}
	}
}

// cpuCgroupOf is the CPU cgroup of pid: the path of /proc/pid/cgroup's
// line for the cpu controller (v1), or of its one line (v2).
func cpuCgroupOf(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	unified := ""
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				return parts[2], nil
			}
		}
	}
	if unified != "" {
		return unified, nil
	}
	return "", os.ErrNotExist
}
