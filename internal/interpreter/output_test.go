package interpreter

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestKernelOutputBound: one print of 200 MiB, and 200 writes of 1 MiB
// that no flush separates, in a kernel with the address space of the
// code-interpreter template's (a 1 GiB sandbox): each became one kernel
// message, whose packing passed RLIMIT_AS and killed the kernel with
// SIGSEGV (orjson), the user's variables with it. The kernel now cuts each
// execution's output under the server's limit, with the server's marker,
// and lives.
func TestKernelOutputBound(t *testing.T) {
	const limit = 32 << 20 // the default, which the template keeps
	s := startServer(t, Config{KernelAddressSpace: int64(KernelAddressSpace(1 << 30))})
	s.execute(t, map[string]any{"code": "kept = 42"})
	for _, tc := range []struct {
		name, code, char string
	}{
		{"one print", "print('x' * (200 << 20))\nprint('tail')", "x"},
		{"unflushed writes", "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * (1 << 20))\nprint('tail')", "y"},
		{"characters of two bytes", "print('é' * (100 << 20))\nprint('tail')", "é"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := s.execute(t, map[string]any{"code": tc.code})
			if ls.last() != "end_of_execution" || len(ls.of("error")) != 0 {
				t.Fatalf("the cell did not end well: last line %q, errors %v", ls.last(), ls.of("error"))
			}
			out := ls.stdout()
			if len(out) > limit || len(out) < limit/2 || strings.Trim(out, tc.char) != "" || !utf8.ValidString(out) {
				t.Errorf("stdout %d bytes of %q (valid UTF-8: %v), want under %d bytes of it", len(out), strings.Trim(out, tc.char), utf8.ValidString(out), limit)
			}
			marker := ls.of("stderr")
			if len(marker) != 1 || !strings.Contains(marker[0].str("text"), "[output truncated: this execution's output passed 33554432 bytes; the rest was dropped]") {
				t.Errorf("stderr %v, want the marker once", marker)
			}
		})
	}
	if got := s.execute(t, map[string]any{"code": "print(kept)"}).stdout(); got != "42\n" {
		t.Errorf("a variable set before: stdout %q, want 42 (the kernel was replaced)", got)
	}
}
