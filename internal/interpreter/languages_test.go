package interpreter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
)

func TestNormalizeLanguage(t *testing.T) {
	for in, want := range map[string]string{
		"": "python", " Python ": "python", "BASH": "bash", "js": "javascript", "JavaScript": "javascript",
		"ts": "typescript", "r": "r", "java": "java",
	} {
		if got := normalizeLanguage(in); got != want {
			t.Errorf("normalizeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

// Languages without a kernel here are a 400 that says why, before any
// kernel starts.
func TestLanguageRefused(t *testing.T) {
	s, err := New(Config{Python: "python3", Cwd: t.TempDir(), Logger: testLogger()}) // no Deno, R or JJava
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	srv := &testServer{Server: s, URL: ts.URL}
	for _, tc := range []struct{ lang, want string }{
		{"cobol", "this code interpreter runs python, bash, javascript (js), typescript (ts), r and java"},
		{"r", "start space-interpreter with -r"},
		{"java", "start space-interpreter with -jjava"},
		{"js", "start space-interpreter with -deno"},
		{"typescript", "start space-interpreter with -deno"},
	} {
		for _, path := range []string{"/execute", "/contexts", "/executions"} {
			body := map[string]any{"code": "1", "language": tc.lang}
			if path == "/contexts" {
				body = map[string]any{"language": tc.lang}
			}
			status, msg := srv.call(t, "POST", path, body, nil)
			if status != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
				t.Errorf("%s %s: %d %q, want 400 with %q", path, tc.lang, status, msg, tc.want)
			}
		}
	}
}

// cellCase is a cell and what its lines must show.
type cellCase struct {
	lang, code string
	stdout     string // exact, when not ""
	stderr     string // exact, when not ""
	main       string // the main result's text, when not ""
	err        string // "name: value" of the error line, when not ""
	traceback  string // in the error's traceback, when not ""
}

func (tc cellCase) check(t *testing.T, ls lines) {
	t.Helper()
	if ls.last() != "end_of_execution" {
		t.Errorf("last line %q: %v", ls.last(), ls)
	}
	if len(ls.of("number_of_executions")) != 1 {
		t.Errorf("want one number_of_executions line: %v", ls)
	}
	if tc.stdout != "" && ls.stdout() != tc.stdout {
		t.Errorf("stdout %q, want %q", ls.stdout(), tc.stdout)
	}
	if tc.stderr != "" {
		var got string
		for _, l := range ls.of("stderr") {
			got += l.str("text")
		}
		if got != tc.stderr {
			t.Errorf("stderr %q, want %q", got, tc.stderr)
		}
	}
	if tc.main != "" && ls.mainText() != tc.main {
		t.Errorf("main result %q, want %q (%v)", ls.mainText(), tc.main, ls)
	}
	errs := ls.of("error")
	switch {
	case tc.err == "" && len(errs) > 0:
		t.Errorf("unexpected error %v", errs)
	case tc.err != "" && len(errs) != 1:
		t.Errorf("want one error %q, got %v", tc.err, ls)
	case tc.err != "":
		if got := errs[0].str("name") + ": " + errs[0].str("value"); got != tc.err {
			t.Errorf("error %q, want %q", got, tc.err)
		}
		if !strings.Contains(errs[0].str("traceback"), tc.traceback) {
			t.Errorf("traceback %q, want it to hold %q", errs[0].str("traceback"), tc.traceback)
		}
	}
}

// Cells of each language on its default context (made by the first
// execution that names the language), mapped onto the same lines.
func TestLanguageCells(t *testing.T) {
	s := sharedServer(t)
	for _, tc := range []cellCase{
		{lang: "bash", code: "echo hi", stdout: "hi\n"},
		// bash runs on a terminal: stderr arrives as stdout.
		{lang: "bash", code: "echo oops >&2", stdout: "oops\n"},
		{lang: "bash", code: "for i in 1 2; do\n  echo $i\ndone", stdout: "1\n2\n"},
		{lang: "bash", code: "cat <<EOF\nline one\nline two\nEOF\necho after", stdout: "line one\nline two\nafter\n"},
		{lang: "bash", code: "false", err: "ExitStatus: 1"},
		{lang: "bash", code: "ls /nonexistent-space", stdout: "ls: cannot access '/nonexistent-space': No such file or directory\n", err: "ExitStatus: 2"},
		{lang: "bash", code: "false; true"}, // the last command's status counts
		{lang: "javascript", code: "1 + 1", main: "2"},
		{lang: "js", code: "'abc'", main: "abc"},
		{lang: "js", code: "console.log('hi'); console.error('oops')", stdout: "hi\n", stderr: "oops\n"},
		{lang: "js", code: "[1, 2, { a: 3 }]", main: "[ 1, 2, { a: 3 } ]"},
		{lang: "js", code: "await new Promise((r) => setTimeout(r, 50)); 'later'", main: "later"},
		{lang: "js", code: "function f() { throw new TypeError('bad') }\nf()", err: "TypeError: bad", traceback: "at f"},
		{lang: "typescript", code: "const n: number = 21\nn * 2", main: "42"},
		{lang: "ts", code: "import { join } from 'node:path'\njoin('a', 'b')", main: "a/b"},
	} {
		t.Run(tc.lang+" "+tc.code, func(t *testing.T) {
			tc.check(t, s.execute(t, map[string]any{"code": tc.code, "language": tc.lang}))
		})
	}
}

// A language's default context keeps its state between executions that
// name the language, as E2B's server does; js and javascript are one.
func TestLanguageDefaultContexts(t *testing.T) {
	s := startServer(t, Config{})
	for _, tc := range []struct{ lang, set, get, want string }{
		{"bash", "export SPACE_Z=7", "echo $SPACE_Z", "7\n"},
		{"javascript", "globalThis.z = 7", "console.log(z)", "7\n"},
	} {
		s.execute(t, map[string]any{"code": tc.set, "language": tc.lang})
		if got := s.execute(t, map[string]any{"code": tc.get, "language": tc.lang}).stdout(); got != tc.want {
			t.Errorf("%s: state not kept: %q", tc.lang, got)
		}
	}
	if got := s.execute(t, map[string]any{"code": "console.log(z)", "language": "js"}).stdout(); got != "7\n" {
		t.Errorf("js is not javascript's context: %q", got)
	}
	if got := s.execute(t, map[string]any{"code": "typeof z", "language": "ts"}).mainText(); got != "undefined" {
		t.Errorf("typescript shares javascript's context: %q", got)
	}
	var list []map[string]string
	if status, msg := s.call(t, "GET", "/contexts", nil, &list); status != http.StatusOK {
		t.Fatalf("list: %d %s", status, msg)
	}
	count := map[string]int{}
	for _, c := range list {
		count[c["language"]]++
	}
	if count["python"] != 1 || count["bash"] != 1 || count["javascript"] != 1 || count["typescript"] != 1 {
		t.Errorf("contexts %v", list)
	}
}

// A bash context made with POST /contexts runs in its directory, keeps
// shell state, and restarts with none.
func TestBashContext(t *testing.T) {
	s := sharedServer(t)
	dir := t.TempDir()
	id := s.newLangContext(t, "bash", dir)
	s.execute(t, map[string]any{"code": "x=5; cd /", "context_id": id})
	if got := s.execute(t, map[string]any{"code": "echo $x; pwd", "context_id": id}).stdout(); got != "5\n/\n" {
		t.Errorf("state %q", got)
	}
	if status, msg := s.call(t, "POST", "/contexts/"+id+"/restart", nil, nil); status != http.StatusOK {
		t.Fatalf("restart: %d %s", status, msg)
	}
	if got := s.execute(t, map[string]any{"code": "echo \"[$x]\"; pwd", "context_id": id}).stdout(); got != "[]\n"+dir+"\n" {
		t.Errorf("after restart %q", got)
	}
}

// Env vars in every language: the sandbox's (the agent's state file,
// updated when it changes) and a request's env_vars, set for the cell
// only. Values reach the kernel as data, whatever they hold.
func TestEnvVarsByLanguage(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	writeState := func(env map[string]string) {
		b, _ := json.Marshal(map[string]any{"token": "tok", "env_vars": env})
		if err := os.WriteFile(state+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(state+".tmp", state); err != nil {
			t.Fatal(err)
		}
	}
	writeState(map[string]string{"SPACE_G1": "one"})
	s := startServer(t, Config{StatePath: state})
	run := func(t *testing.T, body map[string]any) lines {
		t.Helper()
		resp, err := s.do(context.Background(), "POST", "/execute", body, http.Header{"X-Access-Token": {"tok"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ls lines
		dec := json.NewDecoder(resp.Body)
		for {
			var l line
			if dec.Decode(&l) != nil {
				break
			}
			ls = append(ls, l)
		}
		return ls
	}
	value := "it's \"quoted\" $HOME `x` \\ ') ; #\ttab"
	for _, tc := range []struct {
		lang string
		get  func(name string) string // code printing the var's value or <unset>, then a newline
	}{
		{"python", func(n string) string { return "import os\nprint(os.environ.get('" + n + "', '<unset>'))" }},
		{"bash", func(n string) string { return `printf '%s\n' "${` + n + `-<unset>}"` }},
		{"javascript", func(n string) string { return "console.log(Deno.env.get('" + n + "') ?? '<unset>')" }},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			writeState(map[string]string{"SPACE_G1": "one"})
			id := s.newLangContext(t, tc.lang, "")
			get := func(name string, env map[string]string) string {
				t.Helper()
				ls := run(t, map[string]any{"code": tc.get(name), "context_id": id, "env_vars": env})
				if len(ls.of("error")) > 0 {
					t.Fatalf("%s: %v", name, ls)
				}
				return strings.TrimSuffix(ls.stdout(), "\n")
			}
			if got := get("SPACE_G1", nil); got != "one" {
				t.Errorf("sandbox env var %q", got)
			}
			if got := get("SPACE_A", map[string]string{"SPACE_A": value}); got != value {
				t.Errorf("env_vars value %q, want %q", got, value)
			}
			if got := get("SPACE_A", nil); got != "<unset>" {
				t.Errorf("env var after its cell %q", got)
			}
			// One that replaces a sandbox var for a cell, then comes back.
			if got := get("SPACE_G1", map[string]string{"SPACE_G1": "mine"}); got != "mine" {
				t.Errorf("replaced sandbox var %q", got)
			}
			if got := get("SPACE_G1", nil); got != "one" {
				t.Errorf("sandbox var after the cell %q", got)
			}
			// The sandbox's env changes (a sandbox handed to a caller).
			writeState(map[string]string{"SPACE_G2": "two"})
			if got := get("SPACE_G1", nil) + " " + get("SPACE_G2", nil); got != "<unset> two" {
				t.Errorf("after the state changed: %q", got)
			}
		})
	}
	t.Run("bash names", func(t *testing.T) {
		ls := run(t, map[string]any{"code": "echo x", "language": "bash", "env_vars": map[string]string{"NOT-A-NAME": "x"}})
		if ls.errorName() != "EnvVarsError" || !strings.Contains(ls.of("error")[0].str("value"), "NOT-A-NAME") {
			t.Errorf("lines %v", ls)
		}
	})
}

// A timeout interrupts the cell in every language, and the next cell runs
// at once on the same context.
func TestLanguageTimeouts(t *testing.T) {
	s := sharedServer(t)
	for _, tc := range []struct{ lang, slow, next, want string }{
		{"bash", "echo started; sleep 30; echo finished", "echo next", "next\n"},
		{"javascript", "let i = 0\nwhile (true) { i++ }", "console.log('next')", "next\n"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			id := s.newLangContext(t, tc.lang, "")
			start := time.Now()
			ls := s.execute(t, map[string]any{"code": tc.slow, "context_id": id, "timeout": 1})
			if took := time.Since(start); took > 6*time.Second {
				t.Errorf("timed-out execution took %v", took)
			}
			if ls.errorName() != "TimeoutError" || len(ls.of("error")) != 1 || ls.last() != "end_of_execution" {
				t.Errorf("lines %v", ls)
			}
			start = time.Now()
			if got := s.execute(t, map[string]any{"code": tc.next, "context_id": id}).stdout(); got != tc.want {
				t.Errorf("next cell %q", got)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("next cell took %v: the interrupted one went on?", took)
			}
		})
	}
}

// An interrupt that is not a timeout (POST /executions/{id}/interrupt)
// ends a bash cell with ExecutionAborted, as E2B reports bash_kernel's
// answer.
//
// "go" is printed by the foreground job itself, not by bash before it:
// bash hands the terminal to a job between its fork and the job's exec,
// and a ^C in that window reaches bash alone, which then waits out the
// job (CI: "echo go; sleep 30" interrupted at "go" ran on for the whole
// grace, and the kernel was restarted). Once the job prints, it holds
// the terminal.
func TestBashInterrupt(t *testing.T) {
	s := sharedServer(t)
	id := s.newLangContext(t, "bash", "")
	exec, _ := s.startExecution(t, map[string]any{"code": "sh -c 'echo go; exec sleep 30'", "context_id": id},
		func(l line) bool { return l.str("text") == "go\n" })
	if status, msg := s.call(t, "POST", "/executions/"+exec+"/interrupt", nil, nil); status != http.StatusOK {
		t.Fatalf("interrupt: %d %s", status, msg)
	}
	ls := s.events(t, exec, 0)
	if ls.errorName() != "ExecutionAborted" || ls.last() != "end_of_execution" {
		t.Errorf("lines %v", ls)
	}
}

// Deleting a bash context kills what its cells started, even what
// ignores SIGHUP in bash's own session.
func TestBashDeleteLeavesNothing(t *testing.T) {
	s := sharedServer(t)
	id := s.newLangContext(t, "bash", "")
	ls := s.execute(t, map[string]any{"code": "nohup sleep 1000 >/dev/null 2>&1 &\necho $!", "context_id": id})
	out := strings.Fields(ls.stdout()) // "[1] PID" (job control), then PID
	if len(out) == 0 {
		t.Fatalf("no output: %v", ls)
	}
	pid, err := strconv.Atoi(out[len(out)-1])
	if err != nil {
		t.Fatalf("no pid: %v", ls)
	}
	if status, _ := s.call(t, "DELETE", "/contexts/"+id, nil, nil); status != http.StatusOK {
		t.Fatalf("delete: %d", status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("sleep %d outlived its context", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid is a process that has not exited (a zombie
// nobody reaped has).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// A JavaScript kernel that fills its heap dies alone (its heap is bounded
// below the sandbox's memory), and the cell says it ran out of memory; the
// next cell gets a new kernel.
func TestDenoHeapBound(t *testing.T) {
	s := startServer(t, Config{KernelAddressSpace: 768 << 20}) // a 320 MiB heap
	id := s.newLangContext(t, "javascript", "")
	ls := s.execute(t, map[string]any{"code": "const a = []\nwhile (true) a.push('x'.repeat(1 << 20) + a.length)", "context_id": id, "timeout": 60})
	if ls.last() != "unexpected_end_of_execution" || ls.errorName() != "UnexpectedEndOfExecution" {
		t.Errorf("lines %v", ls)
	}
	// V8 said so on stderr before it trapped (oom.go).
	if e := ls.of("error"); len(e) == 0 || !strings.HasPrefix(e[0].str("value"), "the kernel ran out of memory (") {
		t.Errorf("error %v, want the kernel ran out of memory", e)
	}
	if got := s.execute(t, map[string]any{"code": "1 + 1", "context_id": id}).mainText(); got != "2" {
		t.Errorf("next cell %q", got)
	}
}

// A server that dies without Close (SIGKILL, a crash) takes its kernels
// with it: Deno's kernel does not watch its parent as ipykernel does. The
// server runs in a helper process (this test binary again), which prints
// its kernels' pids and is killed.
func TestKernelsDieWithServer(t *testing.T) {
	if os.Getenv("SPACE_INTERPRETER_HELPER") == "1" {
		helperServer(t)
		return
	}
	python, deno := interpretertest.Python(t), interpretertest.Deno(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelsDieWithServer$", "-test.v")
	cmd.Env = append(os.Environ(), "SPACE_INTERPRETER_HELPER=1", "HELPER_PYTHON="+python, "HELPER_DENO="+deno)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 3 && sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "kernel pid "); ok {
			pid, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatalf("helper said %q", sc.Text())
			}
			pids = append(pids, pid)
		}
	}
	if len(pids) < 3 {
		t.Fatalf("helper gave %d pids", len(pids))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("kernel %d outlived its server", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// helperServer is TestKernelsDieWithServer's server: it prints the pid of
// a kernel of each language, then waits to be killed.
func helperServer(t *testing.T) {
	s, err := New(Config{Python: os.Getenv("HELPER_PYTHON"), Deno: os.Getenv("HELPER_DENO"), Cwd: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	srv := &testServer{Server: s, URL: ts.URL}
	for lang, code := range map[string]string{
		"python": "import os\nprint(os.getpid())", "bash": "echo $$", "javascript": "console.log(Deno.pid)",
	} {
		fmt.Printf("kernel pid %s", srv.execute(t, map[string]any{"code": code, "language": lang}).stdout())
	}
	time.Sleep(time.Minute)
}
