package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The daemon's CPU group. On a node whose sandboxes keep both cores busy,
// a process left in the root CPU cgroup waits for the CPU far longer than
// its share says: measured on the 2-core test machine (cgroup v1, kernel
// 6.18) with 20 sandboxes spinning, a task sleeping 1 ms at a time at the
// root overslept by up to 1.6-2.0 s (p99 135 ms, and no better at nice
// -10), against at most 31-125 ms (p99 2-8 ms) in a cgroup of its own
// (docs/benchmarks.md). spaced and the runsc commands it starts (which
// inherit its cgroup) are the control plane every sandbox's requests go
// through, so they run in a group beside the sandboxes' own, with the
// share of a waking sandbox: busy sandboxes cannot starve them, and they
// cannot take more than their share from the sandboxes.
const (
	// daemonGroup is the group's name under cgroupParent (a sandbox id
	// is 20 characters, so it never names one).
	daemonGroup = "spaced"
	// daemonShares is its cgroup v1 cpu.shares; daemonWeight its v2
	// cpu.weight (100 is a sandbox's).
	daemonShares = urgentShares
	daemonWeight = 800
)

// PlaceInDaemonGroup moves process pid (with all its threads) into the
// daemon's CPU group, made if missing, and returns the group's directory.
// Its children, the runsc commands among them, start there. On cgroup v1
// only the cpu hierarchy changes; on v2 the process leaves its cgroup for
// the group under cgroupParent.
func PlaceInDaemonGroup(pid int) (string, error) {
	g, err := daemonGroupOf()
	if err != nil {
		return "", err
	}
	if g.v2 {
		if err := os.MkdirAll(filepath.Dir(g.dir), 0o755); err != nil {
			return "", fmt.Errorf("daemon CPU group: %w", err)
		}
		// Its children get a cpu.weight only when the parent hands them
		// the controller (runsc does so for the sandboxes' groups too).
		_ = os.WriteFile(filepath.Join(filepath.Dir(g.dir), "cgroup.subtree_control"), []byte("+cpu"), 0)
	}
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return "", fmt.Errorf("daemon CPU group: %w", err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, g.file), []byte(strconv.Itoa(g.share)), 0); err != nil {
		return "", fmt.Errorf("daemon CPU group: set %s: %w", g.file, err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return "", fmt.Errorf("daemon CPU group: move process %d into %s: %w", pid, g.dir, err)
	}
	return g.dir, nil
}

// daemonCPUGroup is where the daemon's CPU group is on this host.
type daemonCPUGroup struct {
	dir string
	// path is dir as /proc/PID/cgroup names it.
	path string
	// file is the share's file, share its value.
	file  string
	share int
	v2    bool
}

func daemonGroupOf() (daemonCPUGroup, error) {
	path := "/" + cgroupParent + "/" + daemonGroup
	if v1 := filepath.Join(cgroupRoot, "cpu"); exists(filepath.Join(v1, "cpu.shares")) {
		return daemonCPUGroup{dir: filepath.Join(v1, path), path: path, file: "cpu.shares", share: daemonShares}, nil
	}
	if exists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		return daemonCPUGroup{dir: filepath.Join(cgroupRoot, path), path: path, file: "cpu.weight", share: daemonWeight, v2: true}, nil
	}
	return daemonCPUGroup{}, errors.New("daemon CPU group: no cgroup v1 cpu hierarchy or cgroup v2 under " + cgroupRoot)
}
