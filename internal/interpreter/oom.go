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
// languages.go). And it dies when the sandbox as a whole is full: gVisor
// then SIGKILLs its largest process (a Deno kernel near its heap bound in
// a 1 GiB sandbox died so, before V8 reached its bound), as the host's
// OOM killer would outside gVisor.
//
// The signal alone cannot tell such a death from any other crash, and
// what the kernel held cannot be read once it is gone. So a kernel ran
// out of memory when its runtime said so on its stderr before it died of
// one of these signals; or when it was SIGKILLed (not by us: a kernel we
// end is reported as restarted or deleted) after its resident peak
// (wait4's ru_maxrss, which gVisor reports too) reached half its memory
// limit, as only a kernel that big is an OOM killer's pick. A segfault on
// a refused allocation that says nothing is not caught: it comes well
// under the limit (orjson's under an 896 MiB RLIMIT_AS at 315 MiB
// resident: the refused block is never mapped).

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
		return said || limit > 0 && maxRSS >= limit/2
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGILL:
		return said
	}
	return false
}
