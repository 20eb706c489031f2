package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// restoreCgroup is the CPU cgroup (under cgroupParent) where the runsc
// command of a restore someone waits on runs: a hibernated sandbox's wake,
// a resume, a fork. spaced starts its commands in its own cgroup, the
// root, where a process waits seconds for a CPU while the sandboxes keep
// every core busy; each `runsc restore` under 50 busy sandboxes spent
// 15-19 ms on a CPU and 120-980 ms waiting for one (docs/benchmarks.md).
// Here it has the share the restored sandbox itself has until its agent
// answers (urgentShares), against each sandbox's 1024. Its name is shorter
// than any sandbox id, so it is never taken for one.
const restoreCgroup = "restore"

// joinRestoreCgroup moves pid, a runsc command just started, into the
// restore cgroup of the CPU controller, which it makes on first use. A
// command moved before it forks takes its children along; runsc moves the
// sandbox's own processes into the sandbox's cgroup.
func joinRestoreCgroup(pid int) error {
	dir, file, value := restoreCgroupShare()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make the restore cgroup: %w", err)
	}
	// Written only when it differs: writes of a CPU share serialise in the
	// kernel (a burst of them queued for ~150 ms), reads do not.
	share := filepath.Join(dir, file)
	if data, err := os.ReadFile(share); err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(value) {
		if err := os.WriteFile(share, []byte(strconv.Itoa(value)), 0o644); err != nil {
			return fmt.Errorf("set the restore cgroup's CPU share: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move runsc %d into the restore cgroup: %w", pid, err)
	}
	return nil
}

// restoreCgroupShare is the restore cgroup's directory, the file of its
// CPU share and the share: cpu.shares on cgroup v1, runsc's weight of the
// same share on v2.
func restoreCgroupShare() (dir, file string, value int) {
	if exists(filepath.Join(cgroupRoot, "cgroup.controllers")) { // cgroup v2
		return filepath.Join(cgroupRoot, cgroupParent, restoreCgroup), "cpu.weight", weightOfShares(urgentShares)
	}
	return filepath.Join(cgroupRoot, "cpu", cgroupParent, restoreCgroup), "cpu.shares", urgentShares
}
