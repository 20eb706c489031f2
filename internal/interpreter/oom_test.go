package interpreter

import (
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
)

func TestRanOutOfMemory(t *testing.T) {
	signaled := func(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }
	exited := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	for _, tc := range []struct {
		name string
		ws   syscall.WaitStatus
		said bool
		want bool
	}{
		{"V8 past its heap: trap after saying so", signaled(syscall.SIGTRAP), true, true},
		{"Rust or C++ allocation failure: abort", signaled(syscall.SIGABRT), true, true},
		{"unchecked NULL after saying so", signaled(syscall.SIGSEGV), true, true},
		{"OOM killer", signaled(syscall.SIGKILL), true, true},
		{"segfault, nothing said", signaled(syscall.SIGSEGV), false, false},
		{"killed, nothing said", signaled(syscall.SIGKILL), false, false},
		{"said, then exited", exited(1), true, false},
		{"said, then interrupted", signaled(syscall.SIGINT), true, false},
		{"said, then terminated", signaled(syscall.SIGTERM), true, false},
	} {
		if got := ranOutOfMemory(tc.ws, tc.said); got != tc.want {
			t.Errorf("%s: ranOutOfMemory(%v, %v) = %v, want %v", tc.name, tc.ws, tc.said, got, tc.want)
		}
	}
}

// The kernel's stderr reaches the flag through the line logger, whole
// lines or lines split across writes.
func TestLineLoggerOutOfMemory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   bool
	}{
		{"V8", []string{"\n<--- Last few GCs --->\n", "#\n# Fatal JavaScript out of memory: Reached heap limit\n#\n"}, true},
		{"Rust, split", []string{"memory alloc", "ation of 1073741824 bytes failed\n"}, true},
		{"C++", []string{"terminate called after throwing an instance of 'std::bad_alloc'\n"}, true},
		{"Python's fatal error", []string{"Fatal Python error: _PyObject_GC_Alloc: out of memory\n"}, true},
		{"a segfault", []string{"Fatal Python error: Segmentation fault\n\nThread 0x1 (most recent call first):\n"}, false},
		{"ipykernel's warning", []string{"[IPKernelApp] WARNING | Kernel is running over TCP without encryption\n"}, false},
	} {
		var oom atomic.Bool
		w := &lineLogger{log: slog.New(slog.DiscardHandler), oom: &oom}
		for _, s := range tc.writes {
			w.Write([]byte(s))
		}
		if oom.Load() != tc.want {
			t.Errorf("%s: flag %v, want %v", tc.name, oom.Load(), tc.want)
		}
	}
}
