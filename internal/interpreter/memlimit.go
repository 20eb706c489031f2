package interpreter

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The sandbox's whole memory is one cgroup limit, and gVisor kills the
// whole sandbox (agent and all) when it is exceeded. A kernel that would
// allocate past it must instead fail the allocation, so that Python raises
// MemoryError and only the cell fails. Each kernel gets RLIMIT_AS below
// the sandbox's memory: address space, not RLIMIT_DATA, because gVisor
// enforces RLIMIT_AS on mmap and ignores RLIMIT_DATA there (checked with
// runsc: a 600 MiB bytearray under a 300 MiB RLIMIT_DATA succeeds, under
// RLIMIT_AS it raises MemoryError). Address space is larger than resident
// memory (thread stacks, malloc arenas, libraries), so the kernel's
// resident memory always stays under its limit.

// minKernelAS is the least address space a kernel is given whatever the
// sandbox's size: ipykernel with numpy, pandas and matplotlib loaded and
// a figure drawn peaks at about 480 MiB (MALLOC_ARENA_MAX=2; 8 threads
// on 2 CPUs), so less than
// this would only break imports.
const minKernelAS = 640 << 20

// SandboxMemory is the memory the sandbox may use: the smallest of the
// cgroup's limit (v2 or v1) and MemTotal. Inside gVisor MemTotal is the
// sandbox's limit. 0 if none can be read.
func SandboxMemory() uint64 {
	var best uint64
	consider := func(v uint64) {
		if v > 0 && (best == 0 || v < best) {
			best = v
		}
	}
	consider(readLimit("/sys/fs/cgroup/memory.max"))
	consider(readLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
	consider(memTotal("/proc/meminfo"))
	return best
}

// KernelAddressSpace is the RLIMIT_AS each kernel gets in a sandbox with
// total bytes of memory: what is left after a reserve for the agent, this
// server and the sandbox's other processes (an eighth, at least 96 MiB),
// but never under minKernelAS. 0 (no limit) when total is unknown.
func KernelAddressSpace(total uint64) uint64 {
	if total == 0 {
		return 0
	}
	reserve := max(total/8, 96<<20)
	if total < reserve+minKernelAS {
		return minKernelAS
	}
	return total - reserve
}

func readLimit(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v >= 1<<60 { // "max", or v1's "no limit" (a huge number)
		return 0
	}
	return v
}

func memTotal(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := meminfoBytes(b, "MemTotal")
	return v
}

// meminfoBytes returns field of a /proc/meminfo text ("MemTotal: N kB")
// in bytes, and whether it was there.
func meminfoBytes(meminfo []byte, field string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		var kb uint64
		if n, _ := fmt.Sscanf(sc.Text(), field+": %d kB", &kb); n == 1 {
			return kb << 10, true
		}
	}
	return 0, false
}

// vmHeapMiB is the heap bound of a kernel whose runtime reserves too
// much address space for RLIMIT_AS (Deno's V8: --max-old-space-size), whose Python peers get addrSpace of address space
// (0: no bound): half of that less 64 MiB, and never under 256 MiB, which
// Deno needs to start.
//
// Half, because such a kernel at its bound holds its heap and about 200
// MiB besides (V8, Deno), and what it fills must leave room for the
// sandbox's other kernels: a Python kernel that ran big cells keeps about
// 300 MiB in the host's accounting (gVisor keeps the pages it freed). If
// the sandbox's memory runs out first, the host's OOM killer picks a
// process by its size, and that may be another context's kernel: CI saw
// a Python context lose its state while a JavaScript cell filled a 640
// MiB heap (the bound was addrSpace less 256 MiB) in a 1 GiB sandbox. In
// code-interpreter-v1 (1 GiB) the heap is now 384 MiB.
func vmHeapMiB(addrSpace uint64) uint64 {
	if addrSpace == 0 {
		return 0
	}
	return max(addrSpace>>21, 320) - 64
}

// jvmHeapMiB is JJava's -Xmx: the Python kernels' address space less 256
// MiB, at least 256 MiB. Not vmHeapMiB's half: a JVM holds far less
// besides its heap than Deno, and at 384 MiB one 200 MB string and its
// cut copy did not fit (red team interp-flood-java-print: OutOfMemoryError).
func jvmHeapMiB(addrSpace uint64) uint64 {
	if addrSpace == 0 {
		return 0
	}
	return max(addrSpace>>20, 512) - 256
}
