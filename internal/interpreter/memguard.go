package interpreter

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"
)

// The sandbox's memory is one host cgroup limit, and when the sandbox
// passes it the host's OOM killer ends the whole sandbox: it kills the
// biggest process first, a systrap stub of the biggest kernel, which
// frees nothing (the kernel's memory is the sentry's memory file), and
// then the sentry (seen: a JavaScript cell that printed 200 MiB, then
// two Python cells that did, in one 1 GiB code-interpreter-v1 sandbox;
// the Deno kernel kept 597 MiB resident, Python 315 MiB, this server 195
// MiB). Each kernel's own bound (RLIMIT_AS, V8's heap) is under the
// sandbox's memory, but their sum is not.
//
// memoryGuard is the sandbox's own OOM killer for its kernels. While a
// cell runs it reads the sandbox's free memory every memoryCheckEvery
// (availableMemory: what the host's cgroup would say but for the
// sentry's own 30-50 MiB, which the reserve covers), and when that falls
// under its reserve it kills the kernel with a running cell that holds
// the most (with what its cells started). That cell ends with "the
// kernel ran out of memory", the other contexts keep their state, and the
// next cell gets a new kernel. Idle kernels are left alone: they do not
// grow, and their state is what a user would lose. While no cell runs
// the guard does not wake (an idle sandbox costs nothing for it).
type memoryGuard struct {
	reserve uint64
	free    func() (uint64, error) // the sandbox's available memory, in bytes
	procs   func() []procStat
	log     *slog.Logger

	mu      sync.Mutex
	running map[*kernel]int // kernels with a running cell, and how many
	wake    chan struct{}   // a cell started while none ran
	stop    chan struct{}
	stopped sync.Once
}

// memoryCheckEvery is how often the guard reads the free memory while a
// cell runs: a reserve of 100 MiB lasts 20 ms at 5 GB/s of allocation,
// faster than a kernel fills pages in gVisor.
const memoryCheckEvery = 20 * time.Millisecond

// MemoryReserve is the free memory under which the guard kills a busy
// kernel in a sandbox with total bytes of memory: a tenth, at least 64
// MiB (0 when total is unknown: no guard).
func MemoryReserve(total uint64) uint64 {
	if total == 0 {
		return 0
	}
	return max(total/10, 64<<20)
}

func newMemoryGuard(reserve uint64, log *slog.Logger) *memoryGuard {
	return &memoryGuard{reserve: reserve, free: availableMemory, procs: processes, log: log,
		running: map[*kernel]int{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// cellRunning counts a cell running on k until done is called.
func (g *memoryGuard) cellRunning(k *kernel) (done func()) {
	g.mu.Lock()
	g.running[k]++
	first := len(g.running) == 1 && g.running[k] == 1
	g.mu.Unlock()
	if first {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
	return func() {
		g.mu.Lock()
		if g.running[k]--; g.running[k] <= 0 {
			delete(g.running, k)
		}
		g.mu.Unlock()
	}
}

// run checks the free memory while any cell runs, until close.
func (g *memoryGuard) run() {
	t := time.NewTicker(memoryCheckEvery)
	defer t.Stop()
	for {
		if g.idle() {
			select {
			case <-g.wake:
			case <-g.stop:
				return
			}
			continue
		}
		g.check()
		select {
		case <-t.C:
		case <-g.stop:
			return
		}
	}
}

func (g *memoryGuard) close() { g.stopped.Do(func() { close(g.stop) }) }

func (g *memoryGuard) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.running) == 0
}

// check kills the biggest busy kernel if the free memory is under the
// reserve, and waits for it to be gone and the free memory to be back
// over the reserve (at most memoryReturnWait): a second look before would
// kill another.
func (g *memoryGuard) check() {
	free, err := g.free()
	if err != nil || free >= g.reserve {
		return
	}
	k, rss := g.biggestBusy()
	if k == nil {
		return
	}
	g.log.Warn("the sandbox is almost out of memory: killing the biggest kernel running a cell",
		"free_mib", free>>20, "reserve_mib", g.reserve>>20, "kernel", k.kind.kernelName(), "kernel_rss_mib", rss>>20)
	k.killForMemory()
	// gVisor gives the killed kernel's memory back some time after it
	// is reaped (seconds on a loaded host): judging before that killed
	// the next busy kernel too, an idle context's small cell.
	deadline := time.After(memoryReturnWait)
	select {
	case <-k.exited:
	case <-deadline:
		return
	case <-g.stop:
		return
	}
	t := time.NewTicker(memoryCheckEvery)
	defer t.Stop()
	for {
		if free, err := g.free(); err != nil || free >= g.reserve {
			return
		}
		select {
		case <-t.C:
		case <-deadline:
			return
		case <-g.stop:
			return
		}
	}
}

// memoryReturnWait bounds how long the guard waits, after a kill, for the
// kernel to end and its memory to come back before it judges again.
const memoryReturnWait = 5 * time.Second

// biggestBusy returns the running-cell kernel whose process family holds
// the most resident memory, and that memory.
func (g *memoryGuard) biggestBusy() (*kernel, uint64) {
	g.mu.Lock()
	busy := make([]*kernel, 0, len(g.running))
	for k := range g.running {
		if k.alive() {
			busy = append(busy, k)
		}
	}
	g.mu.Unlock()
	if len(busy) == 0 {
		return nil, 0
	}
	procs := g.procs()
	var best *kernel
	var most uint64
	for _, k := range busy {
		if rss := familyRSS(procs, k.cmd.Process.Pid); best == nil || rss > most {
			best, most = k, rss
		}
	}
	return best, most
}

// availableMemory is the memory the sandbox has left: /proc/meminfo's
// MemFree plus its file cache (Active(file) and Inactive(file)), or its
// MemAvailable where that is more. Inside gVisor MemAvailable is MemFree,
// and the file cache (the pages of the binaries and libraries the kernels
// map, 116 MiB with two Deno kernels) is the host's page cache, not
// charged to the sandbox's cgroup; what gVisor counts as anonymous memory
// (tmpfs files included) is what the host charges (measured: a 100 MiB
// file in /dev/shm moved both by the same amount). MemFree alone made the
// guard kill a TypeScript cell in a sandbox the host saw half full.
func availableMemory() (uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseAvailable(b)
}

func parseAvailable(meminfo []byte) (uint64, error) {
	free, ok := meminfoBytes(meminfo, "MemFree")
	if !ok {
		return 0, errors.New("no MemFree in /proc/meminfo")
	}
	active, _ := meminfoBytes(meminfo, "Active(file)")
	inactive, _ := meminfoBytes(meminfo, "Inactive(file)")
	available, _ := meminfoBytes(meminfo, "MemAvailable")
	return max(free+active+inactive, available), nil
}
