package interpreter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
)

// startRJavaServer is startServer with the r and java kernels too.
func startRJavaServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startRJavaServerWith(t, cfg, nil)
}

// startRJavaServerWith is startServerWith with the r and java kernels too.
func startRJavaServerWith(t *testing.T, cfg Config, prepare func(*Server)) *testServer {
	t.Helper()
	cfg.R = interpretertest.R(t)
	cfg.Java, cfg.JJava = interpretertest.JJava(t)
	return startServerWith(t, cfg, prepare)
}

// The code of the env ops is the kernel's language with the names and
// values as data: R string literals that hold any character, and base64
// in Java (no character of theirs in a Java literal, where \u escapes are
// read before anything else).
func TestRString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":           `"plain"`,
		`a"b\c`:           `"a\"b\\c"`,
		"line\nbreak\t\r": `"line\x0abreak\x09\x0d"`,
		"é \u2028 😀":      "\"é \u2028 😀\"",
		`\u0022`:          `"\\u0022"`,
	} {
		if got := rString(in); got != want {
			t.Errorf("rString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestEnvCodeRefusesNames(t *testing.T) {
	for _, vars := range []map[string]string{{"": "x"}, {"A=B": "x"}, {"A\x00": "x"}, {"A": "x\x00y"}} {
		if _, err := rEnv(envSet, vars); err == nil {
			t.Errorf("rEnv(envSet, %q): no error", vars)
		}
		if _, err := javaEnv(envSet, vars); err == nil {
			t.Errorf("javaEnv(envSet, %q): no error", vars)
		}
		// The sandbox's own are skipped, not an error.
		if code, err := rEnv(envGlobal, vars); err != nil || strings.Contains(code, `"x"`) {
			t.Errorf("rEnv(envGlobal, %q) = %s, %v", vars, code, err)
		}
	}
	code, err := javaEnv(envSet, map[string]string{"K": `"); System.exit(1); ("`})
	if err != nil || strings.Contains(code, "System.exit") || !strings.Contains(code, base64.StdEncoding.EncodeToString([]byte("K"))) {
		t.Errorf("javaEnv: %s, %v", code, err)
	}
}

// Cells of r and java on their default contexts (made by the first
// execution that names the language), mapped onto the same lines as the
// other languages'. IRkernel sends a cell's value as a display (E2B's
// tests read it as results[0]), JJava as the cell's result.
func TestRJavaCells(t *testing.T) {
	s := startRJavaServer(t, Config{})
	for _, tc := range []cellCase{
		{lang: "r", code: `print("Hello, World!")`, stdout: "[1] \"Hello, World!\"\n"},
		{lang: "r", code: `cat("a\n"); message("m")`, stdout: "a\n", stderr: "m\n\n"},
		{lang: "r", code: `stop("boom")`, err: "ERROR: Error in eval(expr, envir, enclos): boom\n", traceback: `stop("boom")`},
		{lang: "R", code: "invisible(1)"},
		{lang: "java", code: "1 + 1", main: "2"},
		{lang: "java", code: `System.out.println("Hello, World!")`, stdout: "Hello, World!\n"},
		{lang: "java", code: `System.err.println("oops")`, stderr: "oops\n"},
		{lang: "java", code: `String s = "a"`},
		{lang: "java", code: `s + "b"`, main: "ab"}, // the default context kept s
		{lang: "java", code: `throw new IllegalStateException("bad")`, err: "RuntimeException: java.lang.IllegalStateException, bad", traceback: "java.lang.IllegalStateException: bad"},
	} {
		t.Run(tc.lang+" "+tc.code, func(t *testing.T) {
			tc.check(t, s.execute(t, map[string]any{"code": tc.code, "language": tc.lang}))
		})
	}
	t.Run("r value", func(t *testing.T) {
		ls := s.execute(t, map[string]any{"code": "1 + 1", "language": "r"})
		if r := ls.of("result"); len(r) != 1 || r[0].str("text") != "[1] 2" || r[0]["is_main_result"] != false {
			t.Errorf("lines %v", ls)
		}
	})
	t.Run("java compile error", func(t *testing.T) {
		ls := s.execute(t, map[string]any{"code": `int x = "s";`, "language": "java"})
		if ls.errorName() != "CompilationException" || !strings.Contains(ls.of("error")[0].str("traceback"), "incompatible types") {
			t.Errorf("lines %v", ls)
		}
	})
}

// A plot is a PNG result, a data.frame a table in html (and text).
func TestRRichResults(t *testing.T) {
	s := startRJavaServer(t, Config{})
	ls := s.execute(t, map[string]any{"code": "plot(1:10, main = 'ten')", "language": "r"})
	r := ls.of("result")
	if len(r) != 1 || len(ls.of("error")) != 0 {
		t.Fatalf("lines %v", ls)
	}
	png, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(r[0].str("png"), "\n", ""))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") || len(png) < 1000 {
		t.Errorf("png: %d bytes, %v", len(png), err)
	}
	ls = s.execute(t, map[string]any{"code": `data.frame(a = 1:2, b = c("x", "y"))`, "language": "r"})
	r = ls.of("result")
	if len(r) != 1 || !strings.Contains(r[0].str("html"), "<table") || !strings.Contains(r[0].str("text"), "1 1 x") {
		t.Errorf("lines %v", ls)
	}
}

// Env vars: the sandbox's (the agent's state file), then a context's, then
// a request's, each overriding the one before; R's are the process's
// environment (a program a cell starts sees them), Java's system
// properties, as on E2B.
func TestRJavaEnvVars(t *testing.T) {
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
	s := startRJavaServer(t, Config{StatePath: state})
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
	value := "it's \"quoted\" $HOME `x` \\ \\u0022 \\\" ') ; #\ttab\nline é 😀"
	for _, tc := range []struct {
		lang string
		get  func(name string) string // code printing the var's value or <unset>
		set  string                   // code setting SPACE_G1 to "ctx" in the context
	}{
		{"r", func(n string) string { return `cat(Sys.getenv("` + n + `", unset = "<unset>"))` }, `Sys.setenv(SPACE_G1 = "ctx")`},
		{"r", func(n string) string {
			return `cat(paste(system2("printenv", "` + n + `", stdout = TRUE), collapse = "\n"))`
		}, `Sys.setenv(SPACE_G1 = "ctx")`},
		{"java", func(n string) string { return `System.out.print(System.getProperty("` + n + `", "<unset>"))` }, `System.setProperty("SPACE_G1", "ctx");`},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			writeState(map[string]string{"SPACE_G1": "one"})
			id := s.newLangContext(t, tc.lang, "")
			get := func(name string, env map[string]string) string {
				t.Helper()
				ls := run(t, map[string]any{"code": tc.get(name), "context_id": id, "env_vars": env})
				if len(ls.of("error")) > 0 && !strings.Contains(tc.get(name), "printenv") {
					t.Fatalf("%s: %v", name, ls)
				}
				if out := ls.stdout(); out != "" {
					return out
				}
				return "<unset>"
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
			if got := get("SPACE_G1", map[string]string{"SPACE_G1": "mine"}); got != "mine" {
				t.Errorf("replaced sandbox var %q", got)
			}
			if got := get("SPACE_G1", nil); got != "one" {
				t.Errorf("sandbox var after the cell %q", got)
			}
			// The context's own value overrides the sandbox's, a request's
			// the context's, which comes back after the request's cell.
			if ls := run(t, map[string]any{"code": tc.set, "context_id": id}); len(ls.of("error")) > 0 {
				t.Fatalf("set in the context: %v", ls)
			}
			if got := get("SPACE_G1", nil); got != "ctx" {
				t.Errorf("context's value %q", got)
			}
			if got := get("SPACE_G1", map[string]string{"SPACE_G1": "mine"}); got != "mine" {
				t.Errorf("request's value over the context's %q", got)
			}
			if got := get("SPACE_G1", nil); got != "ctx" {
				t.Errorf("context's value after the request's cell %q", got)
			}
			writeState(map[string]string{"SPACE_G2": "two"})
			if got := get("SPACE_G1", nil) + " " + get("SPACE_G2", nil); got != "<unset> two" {
				t.Errorf("after the state changed: %q", got)
			}
		})
	}
	for _, lang := range []string{"r", "java"} {
		ls := run(t, map[string]any{"code": "1", "language": lang, "env_vars": map[string]string{"A=B": "x"}})
		if ls.errorName() != "EnvVarsError" || !strings.Contains(ls.of("error")[0].str("value"), "A=B") {
			t.Errorf("%s: lines %v", lang, ls)
		}
	}
}

// A context works in its cwd; a timeout interrupts the cell and the
// context keeps its state; a restart gives a new kernel.
func TestRJavaContexts(t *testing.T) {
	s := startRJavaServer(t, Config{})
	dir := t.TempDir()
	for _, tc := range []struct {
		lang, cwd, set, get, want, slow string
	}{
		{"r", "cat(getwd())", "kept <- 41", "cat(kept + 1)", "42", "Sys.sleep(30)"},
		{"r", "cat(getwd())", "kept <- 41", "cat(kept + 1)", "42", "repeat {}"},
		{"java", `System.out.print(new java.io.File("x").getAbsoluteFile().getParent())`, "int kept = 41;", "System.out.print(kept + 1)", "42", "while (true) {}"},
		{"java", `System.out.print(new java.io.File("x").getAbsoluteFile().getParent())`, "int kept = 41;", "System.out.print(kept + 1)", "42", "Thread.sleep(30000)"},
	} {
		t.Run(tc.lang+" "+tc.slow, func(t *testing.T) {
			id := s.newLangContext(t, tc.lang, dir)
			exec := func(code string, timeout int) lines {
				body := map[string]any{"code": code, "context_id": id}
				if timeout > 0 {
					body["timeout"] = timeout
				}
				return s.execute(t, body)
			}
			if got := exec(tc.cwd, 0).stdout(); got != dir {
				t.Errorf("cwd %q, want %q", got, dir)
			}
			if ls := exec(tc.set, 0); len(ls.of("error")) > 0 {
				t.Fatalf("set: %v", ls)
			}
			ls := exec(tc.slow, 2)
			if ls.errorName() != "TimeoutError" || len(ls.of("error")) != 1 || ls.last() != "end_of_execution" {
				t.Errorf("timed out: %v", ls)
			}
			if got := exec(tc.get, 0).stdout(); got != tc.want {
				t.Errorf("after the timeout %q, want %q", got, tc.want)
			}
			if status, msg := s.call(t, "POST", "/contexts/"+id+"/restart", nil, nil); status != http.StatusOK {
				t.Fatalf("restart: %d %s", status, msg)
			}
			if ls := exec(tc.get, 0); len(ls.of("error")) != 1 {
				t.Errorf("state after a restart: %v", ls)
			}
		})
	}
}

// The output bound holds for r and java: past -max-output-bytes a cell's
// output is cut with the marker, and the kernel lives on.
func TestRJavaOutputLimit(t *testing.T) {
	const limit = 1 << 20
	s := startRJavaServer(t, Config{MaxOutputBytes: limit})
	for _, tc := range []struct{ lang, flood, next string }{
		{"r", `cat(strrep("x", 3e6)); for (i in 1:2000) cat(strrep("y", 1000), "\n")`, `cat("next")`},
		{"java", `System.out.print("x".repeat(3_000_000)); for (int i = 0; i < 2000; i++) System.out.println("y".repeat(1000));`, `System.out.print("next")`},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			id := s.newLangContext(t, tc.lang, "")
			ls := s.execute(t, map[string]any{"code": tc.flood, "context_id": id})
			if n := len(ls.stdout()); n > limit {
				t.Errorf("stdout %d bytes, past the limit %d", n, limit)
			}
			var marker bool
			for _, l := range ls.of("stderr") {
				marker = marker || strings.Contains(l.str("text"), "[output truncated")
			}
			if !marker || ls.last() != "end_of_execution" {
				t.Errorf("no truncation marker (stdout %d bytes, last %q)", len(ls.stdout()), ls.last())
			}
			if got := s.execute(t, map[string]any{"code": tc.next, "context_id": id}).stdout(); got != "next" {
				t.Errorf("next cell %q", got)
			}
		})
	}
}

// An R without IRkernel, a missing jar or a java without JShell is a 400
// that says what is missing, before any kernel starts.
func TestRJavaRefusedWhenMissing(t *testing.T) {
	dir := t.TempDir()
	jar := filepath.Join(dir, "jjava.jar")
	if err := os.WriteFile(jar, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg        Config
		lang, want string
	}{
		{Config{R: "/bin/false"}, "r", "cannot load IRkernel"},
		{Config{JJava: filepath.Join(dir, "missing.jar")}, "java", "missing.jar"},
		{Config{JJava: jar, Java: "/bin/true"}, "java", "no JShell"},
	} {
		tc.cfg.Python, tc.cfg.Cwd, tc.cfg.Logger = "python3", dir, testLogger()
		s, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(s.Handler())
		srv := &testServer{Server: s, URL: ts.URL}
		status, msg := srv.call(t, "POST", "/contexts", map[string]any{"language": tc.lang}, nil)
		if status != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %q, want 400 with %q", tc.lang, status, msg, tc.want)
		}
		ts.Close()
		s.Close()
	}
}

// kernelPeak is the resident peak (VmHWM) of the context's kernel in
// bytes, read while it runs (0: it has none running).
func kernelPeak(t *testing.T, s *testServer, id string) uint64 {
	t.Helper()
	s.mu.Lock()
	c := s.contexts[id]
	s.mu.Unlock()
	if c == nil {
		t.Fatalf("no context %s", id)
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k == nil || !k.alive() {
		return 0 // died
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", k.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kib << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestRJavaKernelOutputBound: output far over the output limit in R and
// in Java, in a kernel with the template's address space (a 1 GiB
// sandbox). Before the kernels bounded it, R's one cat of 200 MB failed
// with "cannot allocate vector of size 190.7 Mb" and printed nothing, its
// cats in a loop the same after 26 s, and a message of 100 MB crashed R's
// JSON encoding ("caught segfault"; the cell ended with no output); JJava
// sent all of a 200 MB print to the server in 8 KiB messages, which the
// server cut at its limit (1045147 bytes kept, over the kernel's bound).
// Now each
// cell ends normally, its output cut under the limit in whole characters
// by the kernel's hook (hooks/irkernel.R, hooks/jjava.jsh) with the
// server's marker once, and the kernel keeps a variable set before.
func TestRJavaKernelOutputBound(t *testing.T) {
	const limit = 1 << 20
	s := startRJavaServer(t, Config{MaxOutputBytes: limit, KernelAddressSpace: int64(KernelAddressSpace(1 << 30))})
	type flood struct {
		name, code, chars string
		grow              uint64 // the most the kernel's resident peak may grow, MiB
	}
	for _, lang := range []struct {
		name, set, get string
		cases          []flood
	}{
		{"r", "kept <- 42", "cat(kept)", []flood{
			// R's textConnection holds what one top-level expression
			// prints (and copies it to complete its line) before the hook
			// sees it: the string and three copies of it at the most. (So
			// one cat of 200 MB still fails under this address space with
			// "cannot allocate vector", in R's own capture, as it did
			// before: a cell error, the kernel alive.)
			{"one cat", `cat(strrep("x", 1e8)); cat("tail")`, "x", 450},
			{"cats in a loop", `for (i in 1:50) cat(strrep("y", 1e6), "\n")`, "y \n", 250},
			{"message", `message(strrep("z", 1e8))`, "z\n", 500},
			{"characters of two bytes", `cat(strrep("é", 1e6))`, "é", 100},
		}},
		{"java", "int kept = 42;", "System.out.print(kept)", []flood{
			// The string itself is 200 MB.
			{"one print", `System.out.print("x".repeat(200_000_000)); System.out.print("tail");`, "x", 450},
			{"prints in a loop", `for (int i = 0; i < 200; i++) System.out.println("y".repeat(1_000_000));`, "y\n", 450},
			{"stderr", `System.err.print("z".repeat(100_000_000));`, "z", 350},
			{"characters of two bytes", `System.out.print("é".repeat(1_000_000));`, "é", 100},
		}},
	} {
		t.Run(lang.name, func(t *testing.T) {
			for _, tc := range lang.cases {
				t.Run(tc.name, func(t *testing.T) {
					id := s.newLangContext(t, lang.name, t.TempDir())
					s.execute(t, map[string]any{"code": lang.set, "context_id": id})
					before := kernelPeak(t, s, id)
					start := time.Now()
					ls := s.execute(t, map[string]any{"code": tc.code, "context_id": id})
					var out string
					var markers int
					for _, l := range ls {
						switch {
						case l.typ() == "stderr" && strings.Contains(l.str("text"), "[output truncated: this execution's output passed 1048576 bytes; the rest was dropped]"):
							markers++
						case l.typ() == "stdout" || l.typ() == "stderr":
							out += l.str("text")
						}
					}
					peak := kernelPeak(t, s, id)
					t.Logf("%s %s: %s, output %d bytes, kernel resident peak %d MiB (%d MiB before)", lang.name, tc.name, time.Since(start).Round(time.Millisecond), len(out), peak>>20, before>>20)
					if ls.last() != "end_of_execution" || len(ls.of("error")) != 0 {
						t.Fatalf("the cell did not end well: last line %q, errors %v", ls.last(), ls.of("error"))
					}
					// The kernel's cut is 64 KiB under the limit; the server's
					// alone (JJava's before) left more than that.
					if len(out) > limit-64<<10 || len(out) < limit/2 || strings.Trim(out, tc.chars) != "" || !utf8.ValidString(out) {
						t.Errorf("output %d bytes, %q besides %q (valid UTF-8: %v); want at most %d bytes of it (the kernel's cut)", len(out), head(strings.Trim(out, tc.chars)), tc.chars, utf8.ValidString(out), limit-64<<10)
					}
					if markers != 1 {
						t.Errorf("%d truncation markers, want 1", markers)
					}
					if peak > before+tc.grow<<20 {
						t.Errorf("the kernel's resident peak grew from %d MiB to %d MiB, more than %d MiB", before>>20, peak>>20, tc.grow)
					}
					if got := s.execute(t, map[string]any{"code": lang.get, "context_id": id}).stdout(); strings.TrimSpace(got) != "42" {
						t.Errorf("a variable set before: stdout %q, want 42 (the kernel was replaced)", got)
					}
				})
			}
		})
	}
}
