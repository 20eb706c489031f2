package redteam

// Output-flood attempts (issue 27 §4): one print of hundreds of MiB, or
// many unflushed writes, killed a Python kernel of code-interpreter-v1
// (its one message's copies passed the kernel's memory) and the user's
// variables with it; Deno and bash had the same hole in their own way, and
// R (a message of 100 MB crashed R's JSON encoding) and Java (a print went
// out whole, 8 KiB a message) theirs. They run on the code interpreter's
// real kernels (the pinned ipykernel, bash_kernel, Deno and JJava of the
// template, installed on the host by internal/interpreter/interpretertest,
// and Debian's IRkernel and JDK) under the template's address
// space, through the interpreter's HTTP API as the SDKs call it. The same
// floods through spaced and the SDKs, in a code-interpreter-v1 sandbox:
// test/interpreter's TestSDKsThroughSpaced/output_flood.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/interpreter"
	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

const (
	outputLimit   = 32 << 20 // the interpreter's default -max-output-bytes, which the template keeps
	outputMarker  = "[output truncated: this execution's output passed 33554432 bytes; the rest was dropped]"
	outputStops   = "the kernel cuts each execution's output 64 KiB under the interpreter's output limit before it becomes a message (Python: the IPython startup file bounds sys.stdout and sys.stderr; JavaScript and TypeScript: a hook cell bounds Deno's console and a fence ends the cell once its output is out; bash: a hook reads bash's terminal in one pass and bounds it; R: a hook cell bounds IRkernel's sends and evaluate's capture; Java: a hook cell replaces JJava's System.out and System.err with bounded print streams), and says so with the server's marker; messages are packed by json, not orjson"
	outputControl = "the same kernel prints a small text whole, and a variable set before the flood is read after it"
)

func outputAttempts() []attempt {
	flood := func(id, lang, desc, code string) attempt {
		return attempt{id: id, category: "resources", family: "interp-output-flood", desc: desc, stops: outputStops, control: outputControl,
			run: func(t *testing.T) error { return outputFlood(t, lang, code) }}
	}
	return []attempt{
		flood("interp-flood-python-print", "python", "print('x' * (200 << 20)) in a Python context", "print('x' * (200 << 20))"),
		flood("interp-flood-python-writes", "python", "200 writes of 1 MiB to sys.stdout that no flush separates", "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * (1 << 20))"),
		flood("interp-flood-js-log", "javascript", "console.log('x'.repeat(200 << 20)) in a JavaScript context", "console.log('x'.repeat(200 << 20))"),
		flood("interp-flood-js-logs", "javascript", "200 console.log of 1 MiB in one JavaScript cell", "for (let i = 0; i < 200; i++) console.log('x'.repeat(1 << 20))"),
		flood("interp-flood-ts-log", "typescript", "console.log of 200 MiB in a TypeScript context", "const s: string = 'x'.repeat(200 << 20); console.log(s)"),
		flood("interp-flood-bash-pipe", "bash", "one line of 200 MB with no newline from a pipe in bash (head -c 200000000 /dev/zero | tr '\\0' x)", "head -c 200000000 /dev/zero | tr '\\0' x"),
		flood("interp-flood-bash-printf", "bash", "one printf of 200 MB of spaces with no newline in bash (printf '%*s' 200000000 '')", "printf '%*s' 200000000 ''"),
		flood("interp-flood-r-message", "r", "message(strrep('x', 1e8)) in an R context (100 MB to stderr)", `message(strrep("x", 1e8))`),
		flood("interp-flood-r-cats", "r", "200 lines of 1 MB from cat in one R top-level loop", `for (i in 1:200) cat(strrep("x", 1e6), "\n")`),
		flood("interp-flood-java-print", "java", "System.out.print(\"x\".repeat(200_000_000)) in a Java context", `System.out.print("x".repeat(200_000_000));`),
		flood("interp-flood-java-prints", "java", "200 System.out.println of 1 MB in one Java cell", `for (int i = 0; i < 200; i++) System.out.println("x".repeat(1_000_000));`),
		{id: "interp-flood-python-json", category: "resources", desc: "a Python cell whose value is a dict holding 200 MiB (its repr and its JSON, which orjson packed)",
			stops:   "the JSON formatter sizes a value's JSON with the standard library a piece at a time before orjson packs it, and a display or value whose bundle is over the output bound is not sent: the kernel sends the truncation marker instead",
			control: "a small dict comes back with its JSON; a variable set before is read after",
			run:     outputJSON},
	}
}

// outServer is the host interpreter the attempts share.
var outServer struct {
	once sync.Once
	url  string
	cwd  string // the kernels' directory, removed by TestOutputFloods
	err  error
}

func outputURL(t *testing.T) string {
	t.Helper()
	outServer.once.Do(func() {
		python, deno := interpretertest.Python(t), interpretertest.Deno(t)
		// R and Java when the host has them (their attempts check first).
		r, _ := exec.LookPath("R")
		java, _ := exec.LookPath("java")
		jjava := filepath.Join(filepath.Dir(filepath.Dir(python)), "share", "jupyter", "kernels", "java", "jjava.jar")
		// Not the first caller's TempDir: that goes with its subtest.
		cwd, err := os.MkdirTemp("", "redteam-interp-")
		if err != nil {
			outServer.err = err
			return
		}
		outServer.cwd = cwd
		s, err := interpreter.New(interpreter.Config{Python: python, Deno: deno, R: r, Java: java, JJava: jjava, Cwd: cwd,
			KernelAddressSpace: int64(interpreter.KernelAddressSpace(1 << 30))})
		if err != nil {
			outServer.err = err
			return
		}
		s.Start()
		if outServer.err = s.Err(); outServer.err != nil {
			return
		}
		outServer.url = httptest.NewServer(s.Handler()).URL // lives as long as the test binary
	})
	if outServer.err != nil {
		t.Fatalf("interpreter: %v", outServer.err)
	}
	return outServer.url
}

type outLine map[string]any

func (l outLine) str(k string) string { s, _ := l[k].(string); return s }

// runCell runs code in context id and returns its lines.
func runCell(url, id, code string) ([]outLine, error) {
	body, _ := json.Marshal(map[string]any{"code": code, "context_id": id})
	resp, err := http.Post(url+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("execute: %s", resp.Status)
	}
	var ls []outLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, sc.Err()
}

func newContext(url, lang string) (string, error) {
	body, _ := json.Marshal(map[string]any{"language": lang})
	resp, err := http.Post(url+"/contexts", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var c struct{ ID string }
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" {
		return "", fmt.Errorf("create a %s context: %s %q", lang, resp.Status, harness.Clip(string(b)))
	}
	return c.ID, nil
}

// cellOutput is a cell's stdout and stderr without the marker, how many
// markers it had, its errors and whether it ended normally.
func cellOutput(ls []outLine) (out string, markers, errs int, ended bool) {
	for _, l := range ls {
		switch t := l.str("type"); {
		case t == "stderr" && strings.Contains(l.str("text"), outputMarker):
			markers++
		case t == "stdout" || t == "stderr":
			out += l.str("text")
		case t == "error":
			errs++
		case t == "end_of_execution":
			ended = true
		}
	}
	return
}

// outputFlood: the flood's cell ends normally, its output cut under the
// limit with the marker once, and the kernel keeps a variable; control:
// a small print shows whole in that kernel.
func outputFlood(t *testing.T, lang, code string) error {
	switch lang {
	case "r":
		interpretertest.R(t)
	case "java":
		interpretertest.JJava(t)
	}
	url := outputURL(t)
	id, err := newContext(url, lang)
	if err != nil {
		return err
	}
	cells := map[string][3]string{
		"python":     {"kept = 42", "print(kept)", "print('small')"},
		"javascript": {"let kept = 42", "console.log(kept)", "console.log('small')"},
		"typescript": {"const kept: number = 42", "console.log(kept)", "console.log('small')"},
		"bash":       {"kept=42", "echo $kept", "echo small"},
		"r":          {"kept <- 42", "cat(kept)", `cat("small\n")`},
		"java":       {"int kept = 42;", "System.out.print(kept)", `System.out.println("small")`},
	}[lang]
	if _, err := runCell(url, id, cells[0]); err != nil {
		return err
	}
	ls, err := runCell(url, id, cells[2])
	if err != nil {
		return err
	}
	if out, _, _, _ := cellOutput(ls); out != "small\n" {
		return fmt.Errorf("positive control: a small print showed %q", out)
	}
	if ls, err = runCell(url, id, code); err != nil {
		return err
	}
	out, markers, errs, ended := cellOutput(ls)
	switch {
	case !ended || errs != 0:
		return fmt.Errorf("the flood's cell did not end normally (ended %v, %d errors: %v)", ended, errs, ls[len(ls)-1])
	case len(out) > outputLimit || len(out) < outputLimit/2 || strings.Trim(out, "x \n") != "":
		return fmt.Errorf("%d bytes of output, want the flood's text cut under %d", len(out), outputLimit)
	case (lang == "r" || lang == "java") && len(out) > outputLimit-64<<10:
		// JJava's output was cut by the server alone before, a little
		// under its limit: the kernel's cut is 64 KiB under it.
		return fmt.Errorf("%d bytes of output, more than the kernel's bound %d: the server cut it, not the kernel", len(out), outputLimit-64<<10)
	case markers != 1:
		return fmt.Errorf("%d truncation markers, want 1", markers)
	}
	if ls, err = runCell(url, id, cells[1]); err != nil {
		return err
	}
	if out, _, _, _ := cellOutput(ls); strings.TrimSpace(out) != "42" {
		return fmt.Errorf("after the flood a variable set before reads %q, want 42: the kernel was replaced", out)
	}
	return nil
}

// outputJSON: a value of 200 MiB comes back as no result and the marker;
// control: a small dict's JSON comes back.
func outputJSON(t *testing.T) error {
	url := outputURL(t)
	id, err := newContext(url, "python")
	if err != nil {
		return err
	}
	if _, err := runCell(url, id, "kept = 42"); err != nil {
		return err
	}
	ls, err := runCell(url, id, "{'a': [1, 2]}")
	if err != nil {
		return err
	}
	var results []outLine
	for _, l := range ls {
		if l.str("type") == "result" {
			results = append(results, l)
		}
	}
	if len(results) != 1 || results[0]["json"] == nil {
		return fmt.Errorf("positive control: a small dict gave results %v, want one with its JSON", results)
	}
	if ls, err = runCell(url, id, "{'k': 'x' * (200 << 20)}"); err != nil {
		return err
	}
	_, markers, errs, ended := cellOutput(ls)
	for _, l := range ls {
		if l.str("type") == "result" {
			return fmt.Errorf("a result of the 200 MiB value came back")
		}
	}
	if !ended || errs != 0 || markers != 1 {
		return fmt.Errorf("ended %v, %d errors, %d markers; want a normal end with the marker once", ended, errs, markers)
	}
	if ls, err = runCell(url, id, "print(kept)"); err != nil {
		return err
	}
	if out, _, _, _ := cellOutput(ls); out != "42\n" {
		return fmt.Errorf("after it a variable set before reads %q, want 42", out)
	}
	return nil
}

// TestOutputFloods runs the output-flood attempts on the host's kernels.
func TestOutputFloods(t *testing.T) {
	testenv.NeedCommand(t, "python3")
	t.Cleanup(func() {
		if outServer.cwd != "" {
			os.RemoveAll(outServer.cwd)
		}
	})
	for _, a := range outputAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
}
