package interpreter

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procStat is what /proc/PID/stat says of a process's family and size.
// tpgid is the foreground process group of its terminal (0 or -1 when
// it has none); rss is its resident memory in bytes.
type procStat struct {
	pid, ppid, session, tpgid int
	rss                       uint64
}

// processes lists every process /proc shows (those that vanish while it
// is read are left out).
func processes() []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp session ...": comm may hold
		// spaces and parentheses, so the fields are counted after the
		// last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 22 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		session, err2 := strconv.Atoi(f[3])
		tpgid, err3 := strconv.Atoi(f[5])
		pages, err4 := strconv.ParseUint(f[21], 10, 64) // field 24, rss
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		out = append(out, procStat{pid: pid, ppid: ppid, session: session, tpgid: tpgid, rss: pages * pageSize})
	}
	return out
}

var pageSize = uint64(os.Getpagesize())

// familyRSS returns the resident memory of pid and all its descendants
// in bytes: a kernel and what its cells started (bash_kernel's bash and
// its jobs are in sessions of their own, so the process group would miss
// them).
func familyRSS(procs []procStat, pid int) uint64 {
	children := map[int][]procStat{}
	var total uint64
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
		if p.pid == pid {
			total = p.rss
		}
	}
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p.pid]...)
		total += p.rss
	}
	return total
}

// childSessions returns the sessions led by children of pid (bash_kernel's
// bash, or what a cell started with setsid).
func childSessions(pid int) []int {
	var out []int
	for _, p := range processes() {
		if p.ppid == pid && p.session == p.pid {
			out = append(out, p.session)
		}
	}
	return out
}

// foregroundJobs returns the foreground process groups of the terminals
// of sessions led by children of pid, where that group is not the
// leader's own: the job bash_kernel's bash runs in front.
func foregroundJobs(pid int) []int {
	var out []int
	for _, p := range processes() {
		if p.ppid == pid && p.session == p.pid && p.tpgid > 0 && p.tpgid != p.pid {
			out = append(out, p.tpgid)
		}
	}
	return out
}

// killSessions sends SIGKILL to every process of these sessions.
func killSessions(sessions []int) {
	if len(sessions) == 0 {
		return
	}
	own := syscall.Getpid()
	for _, p := range processes() {
		for _, s := range sessions {
			if p.session == s && p.pid != own {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	}
}
