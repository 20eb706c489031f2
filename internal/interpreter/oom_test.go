package interpreter

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

func TestRanOutOfMemory(t *testing.T) {
	signaled := func(sig syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(sig) }
	exited := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	const limit = 896 << 20
	for _, tc := range []struct {
		name   string
		ws     syscall.WaitStatus
		said   bool
		maxRSS uint64
		want   bool
	}{
		{"V8 past its heap: trap after saying so", signaled(syscall.SIGTRAP), true, 300 << 20, true},
		{"Rust or C++ allocation failure: abort", signaled(syscall.SIGABRT), true, 100 << 20, true},
		{"unchecked NULL after saying so", signaled(syscall.SIGSEGV), true, 100 << 20, true},
		{"killed after saying so", signaled(syscall.SIGKILL), true, 100 << 20, true},
		{"an OOM killer's pick: killed, big", signaled(syscall.SIGKILL), false, limit / 4, true},
		{"killed, small (kill -9 from a cell)", signaled(syscall.SIGKILL), false, limit/4 - 1, false},
		{"killed, big, no limit known", signaled(syscall.SIGKILL), false, 4 << 30, false},
		{"segfault, nothing said, big", signaled(syscall.SIGSEGV), false, limit, false},
		{"said, then exited", exited(1), true, limit, false},
		{"said, then interrupted", signaled(syscall.SIGINT), true, limit, false},
		{"said, then terminated", signaled(syscall.SIGTERM), true, limit, false},
	} {
		l := uint64(limit)
		if tc.name == "killed, big, no limit known" {
			l = 0
		}
		if got := ranOutOfMemory(tc.ws, tc.said, tc.maxRSS, l); got != tc.want {
			t.Errorf("%s: ranOutOfMemory(%v, %v, %d MiB, %d MiB) = %v, want %v", tc.name, tc.ws, tc.said, tc.maxRSS>>20, l>>20, got, tc.want)
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

// A kernel SIGKILLed from outside (as an OOM killer does) is said to have
// run out of memory when it was big, and to have exited when it was
// small: the resident peak reaches the rule through wait4.
func TestKernelKilled(t *testing.T) {
	s := startServer(t, Config{KernelAddressSpace: 896 << 20})
	for _, tc := range []struct{ code, want string }{
		{"import os, signal\nhold = b'x' * (300 << 20)\nos.kill(os.getpid(), signal.SIGKILL)", "the kernel ran out of memory (signal: killed, at "},
		{"import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "the kernel exited (signal: killed, at "},
	} {
		ls := s.execute(t, map[string]any{"code": tc.code})
		if e := ls.of("error"); len(e) != 1 || !strings.HasPrefix(e[0].str("value"), tc.want) || ls.last() != "unexpected_end_of_execution" {
			t.Errorf("%q: lines %v, want an error %q...", tc.code, ls, tc.want)
		}
	}
}
