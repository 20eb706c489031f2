package interpreter_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// outputFlood: issue 27's "one big print kills the kernel", in a sandbox
// of its own made from code-interpreter-v1 on d. One print of 200 MiB, and
// 200 writes of 1 MiB that no flush separates, each became one kernel
// message whose packing passed the kernel's RLIMIT_AS: the kernel died of
// SIGSEGV (orjson) and the user's variables with it. Now the output is cut
// at the server's limit (32 MiB) with its marker, and a variable set before
// is still there. A cell that allocates past the kernel's memory gets
// MemoryError (Python), or its kernel dies and the cell says it ran out of
// memory (JavaScript: V8 past its heap bound), and the next cell runs.
func outputFlood(t *testing.T, d *harness.Daemon) {
	const limit = 32 << 20 // space-interpreter's -max-output-bytes, which the template keeps
	const marker = "[output truncated: this execution's output passed 33554432 bytes; the rest was dropped]"
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "code-interpreter-v1", TimeoutSeconds: 900})
	c, id := d.Client, sb.ID
	// The same floods in the other languages' kernels, each bounded by a
	// hook of its own (hooks/deno.js, hooks/bash_kernel.py): Deno's
	// console.log of 200 MiB took its kernel past the sandbox's memory and
	// came after the cell's end; bash never ended one 200 MB line.
	for _, tc := range []struct{ name, lang, set, get, code, chars string }{
		{"javascript: one console.log of 200 MiB", "javascript", "let kept = 42", "console.log(kept)", "console.log('x'.repeat(200 << 20)); console.log('tail')", "x"},
		{"bash: one line of 200 MB", "bash", "kept=42", "echo $kept", "printf '%*s' 200000000 ''", " "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := harness.Ctx(t, 2*time.Minute)
			cc, err := c.CreateCodeContext(ctx, id, client.CodeContextRequest{Language: tc.lang})
			if err != nil {
				t.Fatal(err)
			}
			defer c.DeleteCodeContext(harness.Ctx(t, time.Minute), id, cc.ID)
			runCell(t, c, id, client.CodeRequest{ContextID: cc.ID, Code: tc.set})
			if r := runCell(t, c, id, client.CodeRequest{ContextID: cc.ID, Code: tc.get}); strings.TrimSpace(r.stdout) != "42" {
				t.Fatalf("control: %s", r)
			}
			r, gaps := floodCell(t, c, id, client.CodeRequest{ContextID: cc.ID, Code: tc.code})
			if r.end != client.CodeEventEnd || r.err != nil {
				t.Fatalf("the cell did not end well: %s", r)
			}
			if n := len(r.stdout); n > limit || n < limit/2 && gaps == 0 || strings.Trim(r.stdout, tc.chars) != "" {
				t.Errorf("stdout of %d bytes (%q besides %q), want under %d bytes of it", n, harness.Clip(strings.Trim(r.stdout, tc.chars)), tc.chars, limit)
			}
			if strings.Count(r.stderr, marker) != 1 {
				t.Errorf("stderr %q, want the marker once", harness.Clip(r.stderr))
			}
			if r := runCell(t, c, id, client.CodeRequest{ContextID: cc.ID, Code: tc.get}); strings.TrimSpace(r.stdout) != "42" {
				t.Errorf("a variable set before the flood: %s (the kernel was replaced)", r)
			}
		})
	}
	runCell(t, c, id, client.CodeRequest{Code: "kept = 42"})
	for _, tc := range []struct{ name, code, char string }{
		{"one print of 200 MiB", "print('x' * (200 << 20))\nprint('tail')", "x"},
		{"200 unflushed writes of 1 MiB", "import sys\nfor _ in range(200):\n    sys.stdout.write('y' * (1 << 20))\nprint('tail')", "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, gaps := floodCell(t, c, id, client.CodeRequest{Code: tc.code})
			if r.end != client.CodeEventEnd || r.err != nil {
				t.Fatalf("the cell did not end well: %s", r)
			}
			// A gap (the execution's log dropped its oldest lines while this
			// client read) leaves less than the whole cut output.
			if n := len(r.stdout); n > limit || n < limit/2 && gaps == 0 || strings.Trim(r.stdout, tc.char) != "" {
				t.Errorf("stdout of %d bytes (%q besides %q), want under %d bytes of %q", n, harness.Clip(strings.Trim(r.stdout, tc.char)), tc.char, limit, tc.char)
			}
			if strings.Count(r.stderr, marker) != 1 {
				t.Errorf("stderr %q, want the marker once", harness.Clip(r.stderr))
			}
			if r := runCell(t, c, id, client.CodeRequest{Code: "print(kept)"}); r.stdout != "42\n" {
				t.Errorf("a variable set before the flood: %s (the kernel was replaced)", r)
			}
		})
	}
	t.Run("python past its memory", func(t *testing.T) {
		r := runCell(t, c, id, client.CodeRequest{Code: "hog = bytearray(4 << 30)"})
		if r.err == nil || r.err.Name != "MemoryError" || r.end != client.CodeEventEnd {
			t.Fatalf("%s", r)
		}
		if r := runCell(t, c, id, client.CodeRequest{Code: "print(kept)"}); r.stdout != "42\n" {
			t.Errorf("after MemoryError: %s (the kernel was replaced)", r)
		}
	})
	t.Run("javascript past its heap", func(t *testing.T) {
		ctx := harness.Ctx(t, 2*time.Minute)
		js, err := c.CreateCodeContext(ctx, id, client.CodeContextRequest{Language: "javascript"})
		if err != nil {
			t.Fatal(err)
		}
		r := runCell(t, c, id, client.CodeRequest{ContextID: js.ID,
			Code: "const hog = []\nwhile (true) hog.push('x'.repeat(1 << 20) + hog.length)"})
		if r.end != client.CodeEventUnexpectedEnd || r.err == nil || !strings.HasPrefix(r.err.Value, "the kernel ran out of memory (") {
			t.Fatalf("%s", r)
		}
		if r := runCell(t, c, id, client.CodeRequest{ContextID: js.ID, Code: "1 + 1"}); r.main == nil || r.main.Text != "2" {
			t.Errorf("the next cell: %s", r)
		}
		if r := runCell(t, c, id, client.CodeRequest{Code: "print(kept)"}); r.stdout != "42\n" {
			t.Errorf("the python context after: %s", r)
		}
	})
}

// floodCell runs code and reads its events to the end as collectCell does,
// but counts gaps (lines the execution's log dropped: it keeps 4 MiB of a
// running execution's lines for a client that reads slower than they
// come) instead of failing on them.
func floodCell(t *testing.T, c *client.Client, id string, req client.CodeRequest) (cell, int) {
	t.Helper()
	code := req.Code
	s, err := c.RunCode(harness.Ctx(t, 5*time.Minute), id, req)
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	defer s.Close()
	var r cell
	gaps := 0
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return r, gaps
		}
		if err != nil {
			t.Fatalf("run %q: %v (%s)", code, err, r)
		}
		switch ev.Type {
		case client.CodeEventStdout:
			r.stdout += ev.Text
		case client.CodeEventStderr:
			r.stderr += ev.Text
		case client.CodeEventError:
			r.err = ev.Error
		case client.CodeEventGap:
			gaps++
		case client.CodeEventEnd, client.CodeEventUnexpectedEnd:
			r.end = ev.Type
		}
	}
}

// sandboxFull: two contexts whose kernels together need more than the
// sandbox's memory, though each is under its own bound. Before the
// interpreter's memory guard the host's OOM killer ended the whole
// sandbox (it kills a systrap stub, which frees nothing, then the
// sentry). Now the kernel whose cell fills the sandbox is killed, the
// cell says it ran out of memory, the idle context keeps its 400 MiB
// variable, and the sandbox lives on. Each kernel's RLIMIT_AS (896 MiB in
// 1 GiB) lets the hog pass 600 MiB: without the guard this fails.
func sandboxFull(t *testing.T, d *harness.Daemon) {
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "code-interpreter-v1", TimeoutSeconds: 600})
	c, id := d.Client, sb.ID
	if r := runCell(t, c, id, client.CodeRequest{Code: "keep = b'k' * (400 << 20)\nprint(len(keep))"}); r.stdout != "419430400\n" {
		t.Fatalf("the idle context's variable: %s", r)
	}
	ctx := harness.Ctx(t, 2*time.Minute)
	hog, err := c.CreateCodeContext(ctx, id, client.CodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	r := runCell(t, c, id, client.CodeRequest{ContextID: hog.ID, Code: "hog = []\nwhile True:\n    hog.append(b'x' * (8 << 20))"})
	if r.end != client.CodeEventUnexpectedEnd || r.err == nil || !strings.HasPrefix(r.err.Value, "the kernel ran out of memory (signal: killed") {
		t.Fatalf("the cell that filled the sandbox: %s", r)
	}
	if r := runCell(t, c, id, client.CodeRequest{Code: "print(len(keep))"}); r.stdout != "419430400\n" {
		t.Errorf("the idle context after: %s", r)
	}
	if r := runCell(t, c, id, client.CodeRequest{ContextID: hog.ID, Code: "print(1 + 1)"}); r.stdout != "2\n" {
		t.Errorf("the next cell on the killed context: %s", r)
	}
	if info, err := c.GetSandbox(ctx, id); err != nil || info.State != "running" {
		t.Errorf("the sandbox after: %+v %v", info, err)
	}
}
