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

// TestKernelOutputBoundLanguages: the same bound in Deno's kernel
// (hooks/deno.js: one console.log of 200 MiB took the kernel to 2.2 GiB
// resident, and its message reached the server after the cell had ended)
// and in bash_kernel (hooks/bash_kernel.py: one line of 200 MB with no
// newline was searched again after every read and never ended). Each cell
// ends normally, its output cut under the limit with the server's marker
// once, and the kernel keeps a variable set before.
func TestKernelOutputBoundLanguages(t *testing.T) {
	const limit = 32 << 20
	s := startServer(t, Config{KernelAddressSpace: int64(KernelAddressSpace(1 << 30))})
	for _, lang := range []struct {
		name, set, get string
		cases          []struct{ name, code, chars string }
	}{
		{"javascript", "let kept = 42", "console.log(kept)", []struct{ name, code, chars string }{
			{"one console.log", "console.log('x'.repeat(200 << 20)); console.log('tail')", "x"},
			{"many console.log", "for (let i = 0; i < 200; i++) console.log('y'.repeat(1 << 20)); console.log('tail')", "y\n"},
			{"console.error and a value", "console.error('z'.repeat(100 << 20)); 7", "z"},
		}},
		{"typescript", "const keptTS: number = 42", "console.log(keptTS)", []struct{ name, code, chars string }{
			{"one console.log", "const big: string = 'x'.repeat(200 << 20); console.log(big)", "x"},
		}},
		{"bash", "kept=42", "echo $kept", []struct{ name, code, chars string }{
			{"one line from a pipe", "head -c 200000000 /dev/zero | tr '\\0' x", "x"},
			{"one printf", "printf '%*s' 200000000 ''", " "},
		}},
	} {
		t.Run(lang.name, func(t *testing.T) {
			id := s.newLangContext(t, lang.name, t.TempDir())
			s.execute(t, map[string]any{"code": lang.set, "context_id": id})
			for _, tc := range lang.cases {
				t.Run(tc.name, func(t *testing.T) {
					ls := s.execute(t, map[string]any{"code": tc.code, "context_id": id})
					if ls.last() != "end_of_execution" || len(ls.of("error")) != 0 {
						t.Fatalf("the cell did not end well: last line %q, errors %v", ls.last(), ls.of("error"))
					}
					var out string
					for _, l := range ls {
						if l.typ() == "stdout" || l.typ() == "stderr" && !strings.Contains(l.str("text"), "[output truncated") {
							out += l.str("text")
						}
					}
					if len(out) > limit || len(out) < limit/2 || strings.Trim(out, tc.chars) != "" {
						t.Errorf("output %d bytes, %q besides %q (first at %d); want under %d bytes of it", len(out), head(strings.Trim(out, tc.chars)), tc.chars, strings.IndexFunc(out, func(r rune) bool { return !strings.ContainsRune(tc.chars, r) }), limit)
					}
					var markers int
					for _, l := range ls.of("stderr") {
						if strings.Contains(l.str("text"), "[output truncated: this execution's output passed 33554432 bytes; the rest was dropped]") {
							markers++
						}
					}
					if markers != 1 {
						t.Errorf("%d truncation markers, want 1", markers)
					}
				})
			}
			if got := s.execute(t, map[string]any{"code": lang.get, "context_id": id}).stdout(); strings.TrimSpace(got) != "42" {
				t.Errorf("a variable set before: stdout %q, want 42 (the kernel was replaced)", got)
			}
		})
	}
}

func head(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// TestKernelRichOutputBound: a display or a cell's value whose bundle is
// over the output limit (text/html, the repr and JSON of a huge dict, an
// image) is not sent by the kernel: it was packed whole (the JSON through
// orjson, which crashes the kernel when its copy does not fit), and the
// server dropped it anyway. The cell ends normally with the marker once,
// without the result, and the kernel keeps its variables. (A value whose
// repr alone passes the kernel's memory gets MemoryError, the kernel
// alive.) Control: a small dict still comes back with its JSON.
func TestKernelRichOutputBound(t *testing.T) {
	s := startServer(t, Config{KernelAddressSpace: int64(KernelAddressSpace(1 << 30))})
	s.execute(t, map[string]any{"code": "kept = 42"})
	small := s.execute(t, map[string]any{"code": "{'a': [1, 2]}"})
	if rs := small.of("result"); len(rs) != 1 || rs[0]["json"] == nil {
		t.Fatalf("a small dict: results %v, want one with its JSON", rs)
	}
	for _, tc := range []struct{ name, code string }{
		{"a huge dict as the value", "{'k': 'x' * (200 << 20)}"},
		{"a huge list displayed", "from IPython.display import display\ndisplay(['y' * (1 << 20)] * 40)"},
		{"huge html", "from IPython.display import HTML, display\ndisplay(HTML('<b>' + 'z' * (40 << 20) + '</b>'))"},
		{"a huge image", "from IPython.display import Image, display\ndisplay(Image(data=b'\\x89PNG' + b'0' * (40 << 20), format='png'))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := s.execute(t, map[string]any{"code": tc.code})
			if ls.last() != "end_of_execution" || len(ls.of("error")) != 0 {
				t.Fatalf("the cell did not end well: last line %q, errors %v", ls.last(), ls.of("error"))
			}
			if rs := ls.of("result"); len(rs) != 0 {
				t.Errorf("%d results, want none", len(rs))
			}
			marker := ls.of("stderr")
			if len(marker) != 1 || !strings.Contains(marker[0].str("text"), "[output truncated: this execution's output passed 33554432 bytes; the rest was dropped]") {
				t.Errorf("stderr %d lines, want the marker once", len(marker))
			}
		})
	}
	if got := s.execute(t, map[string]any{"code": "print(kept)"}).stdout(); got != "42\n" {
		t.Errorf("a variable set before: stdout %q, want 42 (the kernel was replaced)", got)
	}
}

// TestBashOutOfMemory: bash (under the kernels' RLIMIT_AS) that runs out
// of memory dies and bash_kernel starts a new one without its variables;
// the cell said "Restarting Bash" and ended well. It now fails with
// UnexpectedEndOfExecution saying bash ran out of memory. Control: a cell
// that runs exit still gets a new bash without an error.
func TestBashOutOfMemory(t *testing.T) {
	s := startServer(t, Config{KernelAddressSpace: int64(KernelAddressSpace(1 << 30))})
	id := s.newLangContext(t, "bash", t.TempDir())
	ls := s.execute(t, map[string]any{"code": "x=$(head -c 1500000000 /dev/zero | tr '\\0' x); echo ${#x}", "context_id": id})
	if errs := ls.of("error"); len(errs) != 1 || errs[0].str("name") != "UnexpectedEndOfExecution" || !strings.Contains(errs[0].str("value"), "bash ran out of memory") {
		t.Errorf("errors %v, want UnexpectedEndOfExecution: bash ran out of memory", errs)
	}
	if got := s.execute(t, map[string]any{"code": "echo ok", "context_id": id}).stdout(); got != "ok\n" {
		t.Errorf("the next cell: stdout %q, want ok", got)
	}
	if ls := s.execute(t, map[string]any{"code": "exit", "context_id": id}); len(ls.of("error")) != 0 {
		t.Errorf("control: exit gave errors %v, want none", ls.of("error"))
	}
}
