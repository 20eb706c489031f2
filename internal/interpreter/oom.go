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
// languages.go). The signal alone cannot tell such a death from any
// other crash, and what the kernel held then cannot be read once it is
// gone (a segfault on a refused allocation leaves it well under its
// limit: the refused block was never mapped), so a kernel is said to
// have run out of memory only when its runtime said so on its stderr
// before it died of one of these signals.

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

// ranOutOfMemory reports whether a kernel that ended with ws, and whose
// stderr said (or not) that an allocation failed, died of running out of
// memory: killed by a signal that an unhandled allocation failure ends
// in, after saying so.
func ranOutOfMemory(ws syscall.WaitStatus, said bool) bool {
	if !said || !ws.Signaled() {
		return false
	}
	switch ws.Signal() {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGILL, syscall.SIGKILL:
		return true
	}
	return false
}
