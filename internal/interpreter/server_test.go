package interpreter

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

func TestExecuteOutputs(t *testing.T) {
	s := sharedServer(t)
	for _, tc := range []struct {
		name  string
		code  string
		check func(t *testing.T, ls lines)
	}{
		{"value", "1+1", func(t *testing.T, ls lines) {
			if got := ls.mainText(); got != "2" {
				t.Errorf("main result %q, want 2", got)
			}
		}},
		{"quoted string", "'abc'", func(t *testing.T, ls lines) {
			if got := ls.mainText(); got != "abc" {
				t.Errorf("main result %q, want abc (quotes stripped)", got)
			}
		}},
		{"print", "print('hello')", func(t *testing.T, ls lines) {
			if got := ls.stdout(); got != "hello\n" {
				t.Errorf("stdout %q", got)
			}
			if len(ls.of("result")) != 0 {
				t.Errorf("unexpected results: %v", ls.of("result"))
			}
			if ls.of("stdout")[0].str("timestamp") == "" {
				t.Error("stdout line without timestamp")
			}
		}},
		{"stderr", "import sys; print('oops', file=sys.stderr)", func(t *testing.T, ls lines) {
			if got := ls.of("stderr"); len(got) != 1 || got[0].str("text") != "oops\n" {
				t.Errorf("stderr lines %v", got)
			}
		}},
		{"exception", "def f():\n    raise ValueError('bad value')\nf()", func(t *testing.T, ls lines) {
			e := ls.of("error")
			if len(e) != 1 {
				t.Fatalf("want one error line, got %v", e)
			}
			if e[0].str("name") != "ValueError" || e[0].str("value") != "bad value" {
				t.Errorf("error %v", e[0])
			}
			if tb := e[0].str("traceback"); !strings.Contains(tb, "line 2") || strings.Contains(tb, "\x1b[") {
				t.Errorf("traceback without the line or with colours: %q", tb)
			}
		}},
		{"dataframe", "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None], 'c': [1.5, float('nan')]})", func(t *testing.T, ls lines) {
			r := ls.of("result")
			if len(r) != 1 {
				t.Fatalf("results %v", r)
			}
			data, _ := json.Marshal(r[0]["data"])
			if string(data) != `{"a":[1,2],"b":["x",null],"c":[1.5,null]}` {
				t.Errorf("data %s", data)
			}
			if r[0].str("html") == "" || r[0].str("text") == "" {
				t.Error("DataFrame result without html or text")
			}
		}},
		{"matplotlib", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6])\nplt.title('T')\nplt.show()", func(t *testing.T, ls lines) {
			r := ls.of("result")
			if len(r) != 1 {
				t.Fatalf("results %v", ls)
			}
			if r[0]["is_main_result"] != false || len(r[0].str("png")) < 1000 {
				t.Errorf("figure result: main %v, png %d chars", r[0]["is_main_result"], len(r[0].str("png")))
			}
			chart, _ := r[0]["chart"].(map[string]any)
			if chart["type"] != "line" || chart["title"] != "T" {
				t.Errorf("chart %v", chart)
			}
		}},
		{"display several", "from IPython.display import display, HTML, Markdown\ndisplay(HTML('<b>x</b>'))\ndisplay(Markdown('*m*'))\n[1, 2, {'k': 3}]", func(t *testing.T, ls lines) {
			r := ls.of("result")
			if len(r) != 3 {
				t.Fatalf("want 3 results, got %v", r)
			}
			if r[0].str("html") != "<b>x</b>" || r[1].str("markdown") != "*m*" || r[0]["is_main_result"] != false {
				t.Errorf("display results %v %v", r[0], r[1])
			}
			js, _ := json.Marshal(r[2]["json"])
			if string(js) != `[1,2,{"k":3}]` || r[2]["is_main_result"] != true {
				t.Errorf("main result %v", r[2])
			}
		}},
		// Each of the other result fields, from IPython.display's objects
		// (pdf from the display protocol's _repr_pdf_, which has none).
		{"svg", "from IPython.display import SVG\nSVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4\" height=\"4\"><rect width=\"4\" height=\"4\"/></svg>')", func(t *testing.T, ls lines) {
			if r := mainResult(t, ls); !strings.Contains(r.str("svg"), "<rect") || !strings.HasPrefix(r.str("svg"), "<svg") {
				t.Errorf("svg %q", r.str("svg"))
			}
		}},
		{"jpeg", "import io\nfrom PIL import Image as P\nfrom IPython.display import Image\nb = io.BytesIO()\nP.new('RGB', (4, 4), 'red').save(b, 'JPEG')\nImage(data=b.getvalue(), format='jpeg')", func(t *testing.T, ls lines) {
			if b, err := base64.StdEncoding.DecodeString(mainResult(t, ls).str("jpeg")); err != nil || !bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}) {
				t.Errorf("jpeg: %d bytes, %v (want a JPEG in base64)", len(b), err)
			}
		}},
		{"pdf", "class Doc:\n    def _repr_pdf_(self):\n        return b'%PDF-1.4 tiny'\nDoc()", func(t *testing.T, ls lines) {
			if b, err := base64.StdEncoding.DecodeString(mainResult(t, ls).str("pdf")); err != nil || string(b) != "%PDF-1.4 tiny" {
				t.Errorf("pdf %q, %v (want the bytes in base64)", b, err)
			}
		}},
		{"latex", "from IPython.display import Latex\nLatex(r'$x^2 + \\alpha$')", func(t *testing.T, ls lines) {
			if got := mainResult(t, ls).str("latex"); got != `$x^2 + \alpha$` {
				t.Errorf("latex %q", got)
			}
		}},
		{"javascript", "from IPython.display import Javascript\nJavascript('console.log(1)')", func(t *testing.T, ls lines) {
			if got := mainResult(t, ls).str("javascript"); got != "console.log(1)" {
				t.Errorf("javascript %q", got)
			}
		}},
		{"unknown mime in extra", "class X:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n        return {'text/plain': 'x', 'application/vnd.custom+json': {'a': 1}}\nX()", func(t *testing.T, ls lines) {
			r := ls.of("result")
			extra, _ := r[0]["extra"].(map[string]any)
			if len(r) != 1 || extra["application/vnd.custom+json"] == nil {
				t.Errorf("result %v", r)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := s.execute(t, map[string]any{"code": tc.code})
			if ls.last() != "end_of_execution" {
				t.Errorf("last line %q, want end_of_execution", ls.last())
			}
			if len(ls.of("number_of_executions")) != 1 {
				t.Errorf("want one number_of_executions line: %v", ls)
			}
			tc.check(t, ls)
		})
	}
}

// mainResult is the execution's one result, which must be its main one.
func mainResult(t *testing.T, ls lines) line {
	t.Helper()
	r := ls.of("result")
	if len(r) != 1 || r[0]["is_main_result"] != true {
		t.Fatalf("want one main result, got %v (all lines: %v)", r, ls)
	}
	return r[0]
}

// Lines come in the order the kernel produced them, each as it happens.
func TestStreamingOrder(t *testing.T) {
	s := sharedServer(t)
	start := time.Now()
	var firstAt time.Duration
	code := "import sys, time\nprint('a', flush=True)\ntime.sleep(1)\ndisplay(1)\nprint('b', file=sys.stderr, flush=True)\nprint('c')\n2"
	ls, status, msg := s.tryExecute(context.Background(), map[string]any{"code": code}, func(l line) {
		if l.typ() == "stdout" && firstAt == 0 {
			firstAt = time.Since(start)
		}
	})
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, msg)
	}
	if firstAt > 800*time.Millisecond {
		t.Errorf("first stdout after %v: not streamed", firstAt)
	}
	var order []string
	for _, l := range ls {
		switch l.typ() {
		case "stdout", "stderr":
			order = append(order, l.typ()+":"+strings.TrimSpace(l.str("text")))
		case "result":
			order = append(order, "result:"+l.str("text"))
		case "keepalive":
		default:
			order = append(order, l.typ())
		}
	}
	want := "number_of_executions stdout:a result:1 stderr:b stdout:c result:2 end_of_execution"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("order\n got %s\nwant %s", got, want)
	}
	if len(ls.of("keepalive")) == 0 {
		t.Errorf("no keepalive during a quiet second (every %v)", keepaliveEvery)
	}
}

func TestStateKept(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	s.execute(t, map[string]any{"code": "x = 41", "context_id": id})
	ls := s.execute(t, map[string]any{"code": "x + 1", "context_id": id})
	if got := ls.mainText(); got != "42" {
		t.Errorf("x + 1 = %q", got)
	}
	if got := ls.of("number_of_executions")[0]["execution_count"]; got != 2.0 {
		t.Errorf("execution_count %v, want 2", got)
	}
}

// Two contexts run at once, each in its own directory; one context runs
// its cells one after the other.
func TestContextsConcurrent(t *testing.T) {
	s := sharedServer(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	ids := []string{s.newContext(t, dirs[0]), s.newContext(t, dirs[1])}
	var wg sync.WaitGroup
	got := make([]string, 2)
	start := time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls := s.execute(t, map[string]any{"code": "import os, time\ntime.sleep(1)\nos.getcwd()", "context_id": ids[i]})
			got[i] = ls.mainText()
		}()
	}
	wg.Wait()
	if took := time.Since(start); took > 1900*time.Millisecond {
		t.Errorf("two contexts' 1 s cells took %v together: not concurrent", took)
	}
	for i := range dirs {
		if got[i] != dirs[i] {
			t.Errorf("context %d cwd %q, want %q", i, got[i], dirs[i])
		}
	}

	// Same context: serialised, in arrival order.
	start = time.Now()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.execute(t, map[string]any{"code": "import time; time.sleep(0.5)", "context_id": ids[0]})
		}()
	}
	wg.Wait()
	if took := time.Since(start); took < time.Second {
		t.Errorf("two 0.5 s cells on one context took %v: not serialised", took)
	}

	var list []map[string]any
	if status, msg := s.call(t, "GET", "/contexts", nil, &list); status != http.StatusOK {
		t.Fatalf("list: %d %s", status, msg)
	}
	found := 0
	for _, c := range list {
		if (c["id"] == ids[0] || c["id"] == ids[1]) && c["language"] == "python" {
			found++
		}
	}
	if found != 2 {
		t.Errorf("list %v lacks the contexts %v", list, ids)
	}
}

func TestRestartAndDelete(t *testing.T) {
	s := sharedServer(t)
	dir := t.TempDir()
	id := s.newContext(t, dir)
	s.execute(t, map[string]any{"code": "x = 1", "context_id": id})
	if status, msg := s.call(t, "POST", "/contexts/"+id+"/restart", nil, nil); status != http.StatusOK {
		t.Fatalf("restart: %d %s", status, msg)
	}
	ls := s.execute(t, map[string]any{"code": "import os\nprint(os.getcwd())\nx", "context_id": id})
	if ls.errorName() != "NameError" {
		t.Errorf("after restart x is still defined: %v", ls)
	}
	if got := ls.stdout(); got != dir+"\n" {
		t.Errorf("cwd after restart %q, want %q", got, dir)
	}

	if status, _ := s.call(t, "DELETE", "/contexts/"+id, nil, nil); status != http.StatusOK {
		t.Fatalf("delete: %d", status)
	}
	for _, tc := range []struct{ method, path string }{
		{"DELETE", "/contexts/" + id},
		{"POST", "/contexts/" + id + "/restart"},
	} {
		if status, _ := s.call(t, tc.method, tc.path, nil, nil); status != http.StatusNotFound {
			t.Errorf("%s %s after delete: %d, want 404", tc.method, tc.path, status)
		}
	}
	if _, status, _ := s.tryExecute(context.Background(), map[string]any{"code": "1", "context_id": id}, nil); status != http.StatusNotFound {
		t.Errorf("execute on deleted context: %d, want 404", status)
	}
}

// A restart while a cell runs ends that cell with ContextRestarting.
func TestRestartDuringExecution(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	done := make(chan lines)
	go func() {
		done <- s.execute(t, map[string]any{"code": "import time\nprint('go', flush=True)\ntime.sleep(30)", "context_id": id})
	}()
	time.Sleep(time.Second)
	if status, msg := s.call(t, "POST", "/contexts/"+id+"/restart", nil, nil); status != http.StatusOK {
		t.Fatalf("restart: %d %s", status, msg)
	}
	select {
	case ls := <-done:
		if ls.errorName() != "ContextRestarting" {
			t.Errorf("running cell ended with %v", ls)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("running cell did not end after the restart")
	}
}

func TestEnvVars(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	value := `it's "quoted" \ and ') ; import os #`
	ls := s.execute(t, map[string]any{"code": "import os\nprint(os.environ['SPACE_A'], end='')", "context_id": id,
		"env_vars": map[string]string{"SPACE_A": value}})
	if got := ls.stdout(); got != value {
		t.Errorf("env var in the cell %q, want %q", got, value)
	}
	// The user's line numbers are their own: the env is set elsewhere.
	ls = s.execute(t, map[string]any{"code": "1/0", "context_id": id, "env_vars": map[string]string{"SPACE_A": "x"}})
	if tb := ls.of("error")[0].str("traceback"); !strings.Contains(tb, "----> 1 1/0") {
		t.Errorf("traceback does not point at line 1: %q", tb)
	}
	ls = s.execute(t, map[string]any{"code": "import os\nprint(os.environ.get('SPACE_A'))", "context_id": id})
	if got := ls.stdout(); got != "None\n" {
		t.Errorf("env var after the execution: %q, want it gone", got)
	}
	if got := ls.of("number_of_executions")[0]["execution_count"]; got != 3.0 {
		t.Errorf("execution_count %v: the env executions were counted", got)
	}
}

func TestTimeoutInterrupts(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	start := time.Now()
	ls := s.execute(t, map[string]any{"code": "import time\ntime.sleep(30)\ndone = True", "context_id": id, "timeout": 1})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("timed-out execution took %v", took)
	}
	if ls.errorName() != "TimeoutError" || !strings.Contains(ls.of("error")[0].str("traceback"), "time.sleep(30)") {
		t.Errorf("lines %v", ls)
	}
	ls = s.execute(t, map[string]any{"code": "'done' in globals()", "context_id": id})
	if got := ls.mainText(); got != "False" {
		t.Errorf("next cell: %q (the interrupted cell went on?)", got)
	}
}

// A client that goes away mid-cell interrupts it; the next cell runs.
func TestDisconnectInterrupts(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		s.tryExecute(ctx, map[string]any{"code": "import time\nprint('started', flush=True)\ntime.sleep(30)\ndone = True", "context_id": id},
			func(l line) {
				if l.typ() == "stdout" {
					cancel() // the client leaves once the cell runs
				}
			})
	}()
	start := time.Now()
	<-ctx.Done()
	ls := s.execute(t, map[string]any{"code": "'done' in globals()", "context_id": id})
	if got := ls.mainText(); got != "False" {
		t.Errorf("next cell: %q", got)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("next cell ran %v after the client left: not interrupted", took)
	}
}

func TestHugeOutputTruncated(t *testing.T) {
	s := startServer(t, Config{MaxOutputBytes: 1 << 20})
	ls := s.execute(t, map[string]any{"code": "for i in range(10000):\n    print('x' * 1000)\nprint('tail')\n7"})
	out := ls.stdout()
	if len(out) > 1<<20 || len(out) < 1<<19 {
		t.Errorf("stdout %d bytes, want just under 1 MiB", len(out))
	}
	if strings.Contains(out, "tail") {
		t.Error("output after the limit was kept")
	}
	marker := ls.of("stderr")
	if len(marker) != 1 || !strings.Contains(marker[0].str("text"), "output truncated") {
		t.Errorf("no truncation marker: %v", marker)
	}
	if ls.last() != "end_of_execution" || ls.mainText() != "" {
		t.Errorf("last %q, main result %q (dropped results count too)", ls.last(), ls.mainText())
	}
	// The limit is per execution.
	if got := s.execute(t, map[string]any{"code": "print('small')"}).stdout(); got != "small\n" {
		t.Errorf("next execution's stdout %q", got)
	}
}

// TestHugeSingleMessage: one print of 64 MiB, and one display of a 64 MiB
// value, each one kernel message: the server keeps the start of the text
// up to the limit and marks the cut, and never holds the message whole
// (what this process allocates while each cell runs stays far under its
// size; holding it whole allocated over 128 MiB).
func TestHugeSingleMessage(t *testing.T) {
	const limit = 1 << 20
	s := startServer(t, Config{MaxOutputBytes: limit})
	for _, tc := range []struct {
		name, code string
		stdout     bool // the start of the text is kept
	}{
		// The kernel's own bound (startup/00-space.py) taken off: this
		// is the server's.
		{"print", "import sys\ndel sys.stdout.write\nprint('é' + 'x' * (64 << 20))\nprint('tail')\n7", true},
		{"display", "from IPython.display import display, HTML\ndisplay(HTML('x' * (64 << 20)))\nprint('tail')\n7", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ls := s.execute(t, map[string]any{"code": tc.code})
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("allocated %.1f MiB while the cell ran", float64(alloc)/(1<<20))
			if alloc > 24<<20 {
				t.Errorf("the server (and this test's client) allocated %d MiB for a 64 MiB message", alloc>>20)
			}
			out := ls.stdout()
			switch {
			case tc.stdout && (len(out) > limit || len(out) < limit/2 || !strings.HasPrefix(out, "éxxx") || strings.Trim(out, "éx") != ""):
				t.Errorf("stdout: %d bytes, %.20q...; want the start of the text, under %d bytes", len(out), out, limit)
			case !tc.stdout && out != "":
				t.Errorf("stdout %.60q; want nothing (the display was dropped, then everything)", out)
			}
			marker := ls.of("stderr")
			if len(marker) != 1 || !strings.Contains(marker[0].str("text"), "output truncated") {
				t.Errorf("no truncation marker: %v", marker)
			}
			if len(ls.of("result")) != 0 || ls.last() != "end_of_execution" {
				t.Errorf("results %d, last line %q", len(ls.of("result")), ls.last())
			}
		})
	}
	if got := s.execute(t, map[string]any{"code": "print('small')"}).stdout(); got != "small\n" {
		t.Errorf("next execution's stdout %q", got)
	}
}

// A kernel that asks for more memory than its RLIMIT_AS gets MemoryError
// instead of taking the sandbox down; the server and the kernel go on.
func TestMemoryHog(t *testing.T) {
	s := startServer(t, Config{KernelAddressSpace: 1536 << 20})
	s.execute(t, map[string]any{"code": "import numpy, pandas, matplotlib.pyplot as plt\nplt.plot([1]); plt.show()"})
	for _, code := range []string{
		"x = bytearray(3 << 30)",
		"import numpy\nx = numpy.ones((40000, 40000))",
		"chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))",
	} {
		ls := s.execute(t, map[string]any{"code": code})
		if ls.errorName() != "MemoryError" {
			t.Errorf("%q: %v", code, ls)
		}
	}
	if got := s.execute(t, map[string]any{"code": "chunks = None\n1+1"}).mainText(); got != "2" {
		t.Errorf("after the memory errors: %q", got)
	}
}

// A kernel that dies is reported, as a crash and not as want of memory,
// and the next execution gets a new one.
func TestKernelDies(t *testing.T) {
	s := sharedServer(t)
	id := s.newContext(t, "")
	for _, code := range []string{"import os\nos._exit(3)", "import ctypes\nctypes.string_at(0)"} {
		ls := s.execute(t, map[string]any{"code": code, "context_id": id})
		if ls.last() != "unexpected_end_of_execution" || ls.errorName() != "UnexpectedEndOfExecution" {
			t.Errorf("%q: lines %v", code, ls)
		}
		// Not for want of memory (oom.go).
		if e := ls.of("error"); len(e) == 0 || !strings.HasPrefix(e[0].str("value"), "the kernel exited (") {
			t.Errorf("%q: error %v", code, e)
		}
	}
	ls := s.execute(t, map[string]any{"code": "1+1", "context_id": id})
	if ls.mainText() != "2" {
		t.Errorf("after the kernel died: %v", ls)
	}
}

func TestRequests(t *testing.T) {
	s := sharedServer(t)
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
	}{
		{"context and language", map[string]any{"code": "1", "context_id": "x", "language": "python"}, http.StatusBadRequest},
		{"unknown context", map[string]any{"code": "1", "context_id": "nope"}, http.StatusNotFound},
		{"unsupported language", map[string]any{"code": "1", "language": "r"}, http.StatusBadRequest},
		{"language python", map[string]any{"code": "1", "language": " Python "}, http.StatusOK},
		{"nulls", map[string]any{"code": "1", "context_id": nil, "language": nil, "env_vars": nil}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, status, msg := s.tryExecute(context.Background(), tc.body, nil); status != tc.status {
				t.Errorf("status %d (%s), want %d", status, msg, tc.status)
			}
		})
	}
	if status, _ := s.call(t, "POST", "/contexts", map[string]any{"cwd": "/nonexistent"}, nil); status != http.StatusBadRequest {
		t.Errorf("context in a missing cwd: %d", status)
	}
	if status, body := s.call(t, "GET", "/health", nil, nil); status != http.StatusOK || strings.TrimSpace(body) != `"OK"` {
		t.Errorf("health: %d %s", status, body)
	}
}

// The token comes from the agent's state file and may change at any time;
// only /execute requires it (see the package doc).
func TestAuth(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	writeState := func(token string, env map[string]string) {
		b, _ := json.Marshal(map[string]any{"token": token, "env_vars": env})
		tmp := state + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, state); err != nil {
			t.Fatal(err)
		}
	}
	writeState("one", map[string]string{"SANDBOX_VAR": "a"})
	s := startServer(t, Config{StatePath: state})
	try := func(path, token string, body any) int {
		h := http.Header{}
		if token != "" {
			h.Set("X-Access-Token", token)
		}
		method := "POST"
		if body == nil {
			method = "GET"
		}
		resp, err := s.do(context.Background(), method, path, body, h)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	code := map[string]any{"code": "import os\nos.environ.get('SANDBOX_VAR')"}
	for _, tc := range []struct {
		path, token string
		body        any
		want        int
	}{
		{"/execute", "", code, http.StatusUnauthorized},
		{"/execute", "wrong", code, http.StatusUnauthorized},
		{"/execute", "one", code, http.StatusOK},
		{"/contexts", "", nil, http.StatusOK},
		{"/contexts", "wrong", nil, http.StatusUnauthorized},
		{"/contexts", "one", nil, http.StatusOK},
		{"/health", "", nil, http.StatusOK},
	} {
		if got := try(tc.path, tc.token, tc.body); got != tc.want {
			t.Errorf("%s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}

	// A new token (a sandbox handed to a caller) and new sandbox env vars.
	writeState("two", map[string]string{"OTHER": "b"})
	if got := try("/execute", "one", code); got != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d", got)
	}
	ls, status, _ := s.tryExecute(context.Background(), map[string]any{"code": "import os\n(os.environ.get('SANDBOX_VAR'), os.environ.get('OTHER'))"}, nil)
	if status != http.StatusUnauthorized {
		t.Errorf("no token: %d", status)
	}
	resp, err := s.do(context.Background(), "POST", "/execute", map[string]any{"code": "import os\n(os.environ.get('SANDBOX_VAR'), os.environ.get('OTHER'))"}, http.Header{"X-Access-Token": {"two"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"text":"(None, 'b')"`) {
		t.Errorf("sandbox env after the state changed: %s %v", body, ls)
	}
}

// A cell that ignores the interrupt gets its kernel restarted once the
// grace passes; the context goes on with a new kernel. A Deno cell that
// awaits is one: Deno's interrupt stops only running code.
func TestUninterruptibleCell(t *testing.T) {
	s := sharedServer(t)
	defer func(g time.Duration) { interruptGrace = g }(interruptGrace)
	interruptGrace = time.Second
	for _, tc := range []struct{ lang, code, next, want string }{
		{"python", "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)", "1+1", "2"},
		{"bash", "trap '' INT; sleep 30", "echo 2", ""},
		{"javascript", "await new Promise((r) => setTimeout(r, 30000))", "1 + 1", "2"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			id := s.newLangContext(t, tc.lang, "")
			start := time.Now()
			ls := s.execute(t, map[string]any{"code": tc.code, "context_id": id, "timeout": 1})
			if took := time.Since(start); took > 6*time.Second {
				t.Errorf("took %v", took)
			}
			if ls.errorName() != "ContextRestarting" || ls.last() != "end_of_execution" {
				t.Errorf("lines %v", ls)
			}
			ls = s.execute(t, map[string]any{"code": tc.next, "context_id": id})
			if ls.mainText() != tc.want || len(ls.of("error")) > 0 || tc.want == "" && ls.stdout() != "2\n" {
				t.Errorf("after the restart: %v", ls)
			}
		})
	}
}

func TestFloodKept(t *testing.T) {
	s := sharedServer(t)
	const n, contexts = 5000, 4
	var wg sync.WaitGroup
	for range contexts {
		id := s.newContext(t, t.TempDir())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls := s.execute(t, map[string]any{"code": fmt.Sprintf("for i in range(%d):\n    print(i, flush=True)", n), "context_id": id, "timeout": 120})
			if got := strings.Count(ls.stdout(), "\n"); got != n {
				t.Errorf("context %s: %d of %d lines", id, got, n)
			}
			if ls.last() != "end_of_execution" || ls.errorName() != "" {
				t.Errorf("context %s ended with %q (error %q)", id, ls.last(), ls.errorName())
			}
		}()
	}
	wg.Wait()
}

// A fence comes through IOPub after everything the kernel published for
// the request before it: a cell that replied with megabytes of output
// still on their way is not taken for one whose idle was dropped.
func TestFenceAfterOutput(t *testing.T) {
	s := startServer(t, Config{})
	c := s.defaults["python"]
	tk, err := c.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tk.done()
	k, err := c.kernel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, err := k.client.Request(jupyter.Shell, "execute_request", executeContent{
		Code: "print('x' * (8 << 20))", UserExpressions: map[string]any{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fence, err := k.client.Fence(r)
	if err != nil {
		t.Fatal(err)
	}
	defer fence.Close()
	var seen []string
	stdout := 0
	for len(seen) == 0 || seen[len(seen)-1] != jupyter.FenceType {
		m, err := r.Recv(context.Background(), 60*time.Second)
		if err != nil || m == nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		seen = append(seen, m.Channel+":"+m.Type())
		if m.Type() == jupyter.FenceType {
			seen[len(seen)-1] = m.Type()
		}
		if m.Type() == "stream" {
			stdout += len(m.Content)
		}
	}
	if stdout < 8<<20 || !slices.Contains(seen, "iopub:status") || !slices.Contains(seen, "shell:execute_reply") {
		t.Errorf("before the fence: %v, %d bytes of stdout", seen, stdout)
	}
}
