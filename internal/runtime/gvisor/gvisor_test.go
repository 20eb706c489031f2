package gvisor

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/runtimetest"
	"github.com/spacesandbox/space/internal/testenv"
)

// The conformance suite against real runsc. It needs root, runsc and the
// base template (scripts/install-deps.sh and scripts/build-template.sh).
func TestConformance(t *testing.T) {
	testenv.NeedRoot(t, "the gVisor runtime runs runsc, netns and cgroups")
	runsc := testenv.NeedRunsc(t)
	rootfs := testenv.NeedTemplate(t)
	dir := t.TempDir()
	// runsc pins one shared "null" network namespace for gofers under its
	// root; it is per node, not per sandbox, and must go before the dir.
	t.Cleanup(func() {
		for syscall.Unmount(filepath.Join(dir, "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
		}
	})
	plan := network.Plan{CIDR: netip.MustParsePrefix("10.239.0.0/24")}
	var slot int
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Runtime {
			r, err := New(Config{Runsc: runsc, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		Spec: func(t *testing.T, id string) runtime.Spec {
			slot = (slot + 1) % plan.Slots()
			ep, err := plan.Endpoint(id, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := network.Attach(ep); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { network.Detach(ep) })
			return runtime.Spec{
				ID:     id,
				RootFS: rootfs,
				Netns:  ep.NetnsPath,
				Args:   []string{"/bin/sleep", "infinity"},
				Env:    []string{"PATH=/usr/bin:/bin"},
				Limits: runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 64, MaxProcs: 128},
			}
		},
		Busy: func(spec *runtime.Spec) {
			spec.Args = []string{"/bin/sh", "-c", "head -c 33554432 /dev/urandom > /big && while :; do :; done"}
		},
		CPULimit: func(t *testing.T, id string) float64 {
			v, err := cpuLimit(id)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		CPUPriority: func(t *testing.T, id string) int {
			n, err := cpuShares(id)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		Leftovers: func(t *testing.T, id string) []string {
			var left []string
			if out, _ := exec.Command("pgrep", "-f", "runsc.*"+id).Output(); strings.TrimSpace(string(out)) != "" {
				left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
			}
			left = append(left, CgroupDirs(id)...)
			if d := filepath.Join(dir, "sandboxes", id); exists(d) {
				left = append(left, d)
			}
			return left
		},
	})
}

// A zombie is not alive: kill(pid, 0) succeeds on it until it is reaped.
func TestProcessAliveZombie(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for ProcessAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // exited but not waited for: a zombie
	}
	if ProcessAlive(pid) {
		t.Fatal("an exited, unreaped child is reported alive")
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the child was reaped already; the test did not see a zombie")
	}
	cmd.Wait()
	if !ProcessAlive(os.Getpid()) {
		t.Fatal("this process is reported dead")
	}
	if ProcessAlive(0) || ProcessAlive(-1) {
		t.Fatal("pid 0 or -1 reported alive")
	}
}

// cpuShares reads a sandbox's cpu.shares (cgroup v1) or cpu.weight (v2).
func cpuShares(id string) (int, error) {
	for _, dir := range CgroupDirs(id) {
		for _, file := range []string{"cpu.shares", "cpu.weight"} {
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err == nil {
				return strconv.Atoi(strings.TrimSpace(string(data)))
			}
		}
	}
	return 0, fmt.Errorf("no cpu cgroup for %s", id)
}

// cpuLimit reads the CPUs sandbox id's cgroup allows (quota over period).
func cpuLimit(id string) (float64, error) {
	for _, dir := range CgroupDirs(id) {
		if data, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
			var quota, period float64
			if _, err := fmt.Sscan(string(data), &quota, &period); err != nil {
				return 0, fmt.Errorf("cpu.max %q: %w", data, err)
			}
			return quota / period, nil
		}
		quota, qerr := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		period, perr := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if qerr == nil && perr == nil {
			q, err1 := strconv.ParseFloat(strings.TrimSpace(string(quota)), 64)
			p, err2 := strconv.ParseFloat(strings.TrimSpace(string(period)), 64)
			if err1 != nil || err2 != nil || p == 0 {
				return 0, fmt.Errorf("cpu quota %q over period %q", quota, period)
			}
			return q / p, nil
		}
	}
	return 0, fmt.Errorf("no cpu cgroup for %s", id)
}
