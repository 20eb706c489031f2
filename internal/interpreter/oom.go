package interpreter

import (
	"bytes"
	"syscall"
)

// A kernel that passes its memory limit mostly does not die: Python
// raises MemoryError when RLIMIT_AS refuses an allocation, and the cell
// fails. It dies when the allocation that failed was native code's that
// does not handle the failure: V8 past its heap bound (Deno's kernel)
// aborts with a trap, Rust's allocation handler and C++'s bad_alloc
// abort, and C that uses the NULL it got back segfaults (orjson did
// that, which is why kernels no longer pack messages with it:
// languages.go). And it dies of SIGKILL when the sandbox as a whole is
// full: in code-interpreter-v1 (1 GiB) a Deno kernel filling its heap was
// SIGKILLed at 412 MiB resident, before V8 reached its 640 MiB bound,
// while the sandbox's Python kernel held memory too; the host's OOM
// killer does the same outside gVisor.
//
// The signal alone cannot tell such a death from any other crash, and
// what the kernel held cannot be read once it is gone. So a kernel ran
// out of memory when its runtime said so on its stderr before it died of
// one of these signals; or when it was SIGKILLed (not by us: a kernel we
// end is reported as restarted or deleted) after its resident peak
// (wait4's ru_maxrss, which gVisor reports too) reached a quarter of its
// memory limit: an idle kernel is under that (Python with the data stack
// about 100 MiB, Deno about 210 MiB, against 224 MiB in a 1 GiB sandbox),
// so a kill -9 of one still says it exited. A segfault on a refused
// allocation that says nothing is not caught: it comes well under the
// limit (orjson's under an 896 MiB RLIMIT_AS at 315 MiB resident: the
// refused block is never mapped).

// outOfMemorySigns are what runtimes write to stderr when an allocation
// fails for good: V8's "Fatal JavaScript out of memory: Reached heap
// limit" (and Node's "JavaScript heap out of memory"), Python's fatal
// "... out of memory", Rust's "memory allocation of N bytes failed", C++'s
// std::bad_alloc.
var outOfMemorySigns = [][]byte{
	[]byte("out of memory"),
	[]byte("memory allocation of "),
	[]byte("std::bad_alloc"),
}

// saysOutOfMemory reports whether a line of a kernel's stderr is one of
// outOfMemorySigns.
func saysOutOfMemory(line []byte) bool {
	for _, s := range outOfMemorySigns {
		if bytes.Contains(line, s) {
			return true
		}
	}
	return false
}

// ranOutOfMemory reports whether a kernel that ended with ws, whose
// stderr said (or not) that an allocation failed, whose resident peak was
// maxRSS bytes and whose memory limit is limit bytes (0: none), died of
// running out of memory.
func ranOutOfMemory(ws syscall.WaitStatus, said bool, maxRSS, limit uint64) bool {
	if !ws.Signaled() {
		return false
	}
	switch ws.Signal() {
	case syscall.SIGKILL:
		return said || limit > 0 && maxRSS >= limit/4
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGILL:
		return said
	}
	return false
}
