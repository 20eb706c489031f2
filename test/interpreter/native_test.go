package interpreter_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// nativeAPI drives spaced's own code API (/v1/sandboxes/{id}/code and
// /contexts, the Go client and `space run-code`) against a real sandbox
// made from code-interpreter-v1 on d, where that template is built.
func nativeAPI(t *testing.T, d *harness.Daemon) {
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "code-interpreter-v1", TimeoutSeconds: 900})
	c := d.Client
	id := sb.ID

	t.Run("value", func(t *testing.T) {
		r := runCell(t, c, id, client.CodeRequest{Code: "x = 20\nx * 2 + 2"})
		if r.main == nil || r.main.Text != "42" || r.err != nil || r.end != client.CodeEventEnd {
			t.Fatalf("%s", r)
		}
	})
	t.Run("print", func(t *testing.T) {
		r := runCell(t, c, id, client.CodeRequest{Code: "print('hello')\nimport sys; print('warn', file=sys.stderr)"})
		if r.stdout != "hello\n" || r.stderr != "warn\n" || r.main != nil || r.err != nil {
			t.Fatalf("%s", r)
		}
	})
	t.Run("error", func(t *testing.T) {
		r := runCell(t, c, id, client.CodeRequest{Code: "print('before')\n1/0"})
		if r.stdout != "before\n" || r.err == nil || r.err.Name != "ZeroDivisionError" || !strings.Contains(r.err.Traceback, "1/0") ||
			r.end != client.CodeEventEnd {
			t.Fatalf("%s", r)
		}
	})
	t.Run("sse format", func(t *testing.T) { sseFormat(t, d, id) })
	t.Run("matplotlib via space run-code", func(t *testing.T) { runCodeCLI(t, d, id) })
	t.Run("contexts", func(t *testing.T) { contexts(t, c, id) })
	t.Run("env", func(t *testing.T) {
		code := "import os\nos.environ.get('GREETING', 'unset')"
		if r := runCell(t, c, id, client.CodeRequest{Code: code, Env: map[string]string{"GREETING": "hi there"}}); r.main == nil || r.main.Text != "hi there" {
			t.Fatalf("with env: %s", r)
		}
		if r := runCell(t, c, id, client.CodeRequest{Code: code}); r.main == nil || r.main.Text != "unset" {
			t.Fatalf("the next cell: %s", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := runCell(t, c, id, client.CodeRequest{Code: "import time\ntime.sleep(60)", TimeoutSeconds: 1})
		if r.err == nil || r.err.Name != "TimeoutError" || r.end != client.CodeEventEnd || time.Since(start) > 20*time.Second {
			t.Fatalf("after %s: %s", time.Since(start), r)
		}
	})
	t.Run("resume after a cut connection", func(t *testing.T) { resumeCut(t, d, id) })
	t.Run("resume after leaving", func(t *testing.T) { resumeLeft(t, c, id) })
	t.Run("interrupt", func(t *testing.T) { interrupt(t, c, id) })
	t.Run("bad input", func(t *testing.T) { badInput(t, d, c, id) })
	t.Run("sandbox without an interpreter", func(t *testing.T) {
		base := d.NewSandbox(t, client.CreateSandboxRequest{})
		ctx := harness.Ctx(t, time.Minute)
		_, err := c.RunCode(ctx, base.ID, client.CodeRequest{Code: "1"})
		want := fmt.Sprintf("sandbox %s runs no code interpreter: create it from code-interpreter-v1", base.ID)
		if !client.IsFailedPrecondition(err) || client.ErrorStatus(err) != 409 || !strings.Contains(err.Error(), want) {
			t.Fatalf("run code in a base sandbox: %v", err)
		}
		if _, err := c.ListCodeContexts(ctx, base.ID); !client.IsFailedPrecondition(err) {
			t.Fatalf("contexts of a base sandbox: %v", err)
		}
		if _, err := c.RunCode(ctx, "nosuchsandbox", client.CodeRequest{Code: "1"}); !client.IsNotFound(err) {
			t.Fatalf("run code in no sandbox: %v", err)
		}
	})
}

// cell is what one execution sent.
type cell struct {
	id             string
	stdout, stderr string
	results        []*client.CodeResult
	main           *client.CodeResult
	err            *client.CodeError
	end            string
	ids            []uint64
}

func (c cell) String() string {
	main := "<none>"
	if c.main != nil {
		main = fmt.Sprintf("%q", c.main.Text)
	}
	e := "<none>"
	if c.err != nil {
		e = fmt.Sprintf("%s: %s\n%s", c.err.Name, c.err.Value, c.err.Traceback)
	}
	return fmt.Sprintf("execution %s: stdout %q stderr %q main %s results %d end %q ids %v error %s",
		c.id, harness.Clip(c.stdout), harness.Clip(c.stderr), main, len(c.results), c.end, c.ids, e)
}

func runCell(t *testing.T, c *client.Client, id string, req client.CodeRequest) cell {
	t.Helper()
	s, err := c.RunCode(harness.Ctx(t, 2*time.Minute), id, req)
	if err != nil {
		t.Fatalf("run %q: %v", req.Code, err)
	}
	defer s.Close()
	r, err := collectCell(s)
	if err != nil {
		t.Fatalf("run %q: %v (%s)", req.Code, err, r)
	}
	return r
}

// collectCell reads a stream to its end, checking that ids only go up.
func collectCell(s *client.CodeStream) (cell, error) {
	var r cell
	var last uint64
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if ev.ID <= last {
			return r, fmt.Errorf("event %s with id %d after id %d", ev.Type, ev.ID, last)
		}
		last = ev.ID
		r.ids = append(r.ids, ev.ID)
		r.id = ev.ExecutionID
		switch ev.Type {
		case client.CodeEventStdout:
			r.stdout += ev.Text
		case client.CodeEventStderr:
			r.stderr += ev.Text
		case client.CodeEventResult:
			r.results = append(r.results, ev.Result)
			if ev.Result.IsMainResult {
				r.main = ev.Result
			}
		case client.CodeEventError:
			r.err = ev.Error
		case client.CodeEventGap:
			return r, fmt.Errorf("a gap of %d lines", ev.Dropped)
		case client.CodeEventEnd, client.CodeEventUnexpectedEnd:
			r.end = ev.Type
		}
	}
}

// sseFormat reads the wire as curl would: one event per interpreter line,
// id = seq, event = type, data = the line.
func sseFormat(t *testing.T, d *harness.Daemon, id string) {
	req, _ := http.NewRequestWithContext(harness.Ctx(t, time.Minute), "POST", "http://"+d.Addr+"/v1/sandboxes/"+id+"/code",
		strings.NewReader(`{"code":"print(1)\n2"}`))
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var got []string
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		lines := strings.Split(ev, "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "id: ") || !strings.HasPrefix(lines[1], "event: ") || !strings.HasPrefix(lines[2], "data: {") {
			t.Fatalf("event %q in\n%s", ev, b)
		}
		seq, typ := strings.TrimPrefix(lines[0], "id: "), strings.TrimPrefix(lines[1], "event: ")
		if !strings.Contains(lines[2], `"seq":`+seq+`,"type":"`+typ+`"`) {
			t.Fatalf("event %q: data does not carry its seq and type", ev)
		}
		got = append(got, seq+":"+typ)
	}
	if strings.Join(got, " ") != "1:execution 2:number_of_executions 3:stdout 4:result 5:end_of_execution" {
		t.Fatalf("events %v in\n%s", got, b)
	}
}

// runCodeCLI draws a matplotlib figure with `space run-code`, which saves
// the PNG.
func runCodeCLI(t *testing.T, d *harness.Daemon, id string) {
	dir := t.TempDir()
	code := "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('native')\nplt.show()\nprint('drawn')\n'done'"
	cmd := exec.CommandContext(harness.Ctx(t, 2*time.Minute), harness.Bin(t, "space"), "run-code", "--out-dir", dir, id, "-")
	cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
	cmd.Stdin = strings.NewReader(code)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("space run-code: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	png := filepath.Join(dir, "result-1.png")
	if !strings.HasPrefix(stdout.String(), "<Figure size") || !strings.HasSuffix(stdout.String(), "drawn\ndone\n") ||
		strings.TrimSpace(stderr.String()) != png {
		t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Fatalf("%s: %d bytes %q, %v", png, len(b), b[:min(len(b), 16)], err)
	}

	// An error: the traceback on stderr, exit 1.
	cmd = exec.CommandContext(harness.Ctx(t, time.Minute), harness.Bin(t, "space"), "run-code", id, "undefined_name")
	cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "NameError") || stdout.Len() != 0 {
		t.Fatalf("error cell: %v, stdout %q stderr %q", err, stdout.String(), stderr.String())
	}
}

func contexts(t *testing.T, c *client.Client, id string) {
	ctx := harness.Ctx(t, 2*time.Minute)
	one, err := c.CreateCodeContext(ctx, id, client.CodeContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := c.CreateCodeContext(ctx, id, client.CodeContextRequest{Cwd: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Language != "python" || two.Cwd != "/tmp" || one.ID == two.ID {
		t.Fatalf("contexts %+v %+v", one, two)
	}
	runCell(t, c, id, client.CodeRequest{Code: "v = 'one'", ContextID: one.ID})
	runCell(t, c, id, client.CodeRequest{Code: "v = 'two'", ContextID: two.ID})
	for _, x := range []struct{ ctx, want string }{{one.ID, "one"}, {two.ID, "two"}} {
		if r := runCell(t, c, id, client.CodeRequest{Code: "import os\nv + ' ' + os.getcwd()", ContextID: x.ctx}); r.main == nil || !strings.HasPrefix(r.main.Text, x.want+" /") {
			t.Fatalf("context %s: %s", x.ctx, r)
		}
	}
	list, err := c.ListCodeContexts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, x := range list {
		ids[x.ID] = true
	}
	if !ids[one.ID] || !ids[two.ID] || len(list) < 3 {
		t.Fatalf("list %+v", list)
	}
	if err := c.RestartCodeContext(ctx, id, one.ID); err != nil {
		t.Fatal(err)
	}
	if r := runCell(t, c, id, client.CodeRequest{Code: "v", ContextID: one.ID}); r.err == nil || r.err.Name != "NameError" {
		t.Fatalf("after restart: %s", r)
	}
	if err := c.DeleteCodeContext(ctx, id, two.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.RunCode(ctx, id, client.CodeRequest{Code: "v", ContextID: two.ID})
	if !client.IsNotFound(err) || !strings.Contains(err.Error(), "context "+two.ID+" not found in sandbox "+id) {
		t.Fatalf("run in a deleted context: %v", err)
	}
	if err := c.DeleteCodeContext(ctx, id, two.ID); !client.IsNotFound(err) {
		t.Fatalf("delete it again: %v", err)
	}
	if err := c.DeleteCodeContext(ctx, id, one.ID); err != nil {
		t.Fatal(err)
	}
}

// countingCell prints 0..n-1, one line every 50 ms.
func countingCell(n int) (string, string) {
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "%d\n", i)
	}
	return fmt.Sprintf("import time\nfor i in range(%d):\n    print(i, flush=True)\n    time.sleep(0.05)", n), want.String()
}

// cutter tracks a client's connections so that a test can cut them.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cut() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	n := len(c.conns)
	c.conns = nil
	return n
}

// resumeCut cuts the client's connection mid-cell: the stream resumes by
// itself with Last-Event-ID, and no line is lost or repeated.
func resumeCut(t *testing.T, d *harness.Daemon, id string) {
	var cut cutter
	hc := &http.Client{Transport: &http.Transport{DialContext: cut.dial}}
	c := client.New(d.Addr, d.APIKey, client.WithHTTPClient(hc))
	code, want := countingCell(60)
	var resumes []string
	s, err := c.RunCodeResumable(harness.Ctx(t, 2*time.Minute), id, client.CodeRequest{Code: code}, client.ResumeOptions{
		Retries: 5, Backoff: 100 * time.Millisecond,
		OnResume: func(attempt int, err error) { resumes = append(resumes, fmt.Sprintf("%d: %v", attempt, err)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var r cell
	var last uint64
	cuts := 0
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%v (%s)", err, r)
		}
		if ev.ID <= last {
			t.Fatalf("event %s id %d after %d: repeated", ev.Type, ev.ID, last)
		}
		last = ev.ID
		r.ids = append(r.ids, ev.ID)
		switch ev.Type {
		case client.CodeEventStdout:
			r.stdout += ev.Text
			if cuts == 0 && strings.Count(r.stdout, "\n") >= 5 {
				if n := cut.cut(); n == 0 {
					t.Fatal("no connection to cut")
				}
				cuts++
			}
		case client.CodeEventGap:
			t.Fatalf("gap %d", ev.Dropped)
		case client.CodeEventEnd:
			r.end = ev.Type
		}
	}
	if r.stdout != want || r.end != client.CodeEventEnd || cuts != 1 || len(resumes) == 0 {
		t.Fatalf("cuts %d resumes %q: %s\nwant stdout %q", cuts, resumes, r, want)
	}
	t.Logf("resumed after %q; events %v", resumes, r.ids)
}

// resumeLeft leaves a cell's stream (closing it), comes back with the
// last id through CodeEvents: the cell ran on meanwhile, and the lines
// join up exactly.
func resumeLeft(t *testing.T, c *client.Client, id string) {
	ctx := harness.Ctx(t, 2*time.Minute)
	code, want := countingCell(40)
	s, err := c.RunCode(ctx, id, client.CodeRequest{Code: code})
	if err != nil {
		t.Fatal(err)
	}
	var first cell
	for strings.Count(first.stdout, "\n") < 3 {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("%v (%s)", err, first)
		}
		if ev.Type == client.CodeEventStdout {
			first.stdout += ev.Text
		}
	}
	execID, after := s.ExecutionID(), s.LastEventID()
	s.Close()
	time.Sleep(time.Second) // the cell runs on without a client
	execs, err := c.ListExecutions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range execs {
		found = found || e.ID == execID
	}
	if !found {
		t.Fatalf("execution %s not listed: %+v", execID, execs)
	}
	s, err = c.CodeEvents(ctx, id, execID, after)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rest, err := collectCell(s)
	if err != nil {
		t.Fatalf("%v (%s)", err, rest)
	}
	if first.stdout+rest.stdout != want || rest.end != client.CodeEventEnd || rest.ids[0] != after+1 {
		t.Fatalf("first %q then (after %d) %s; want %q", first.stdout, after, rest, want)
	}
	// Once more from the start: everything, the same.
	s2, err := c.CodeEvents(ctx, id, execID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	all, err := collectCell(s2)
	if err != nil || all.stdout != want {
		t.Fatalf("replay from 0: %v %s", err, all)
	}
	// After the end: nothing.
	s3, err := c.CodeEvents(ctx, id, execID, rest.ids[len(rest.ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if none, err := collectCell(s3); err != nil || len(none.ids) != 0 {
		t.Fatalf("after the end: %v %s", err, none)
	}
}

func interrupt(t *testing.T, c *client.Client, id string) {
	ctx := harness.Ctx(t, 2*time.Minute)
	s, err := c.RunCode(ctx, id, client.CodeRequest{Code: "import time\nprint('started', flush=True)\nfor i in range(600):\n    time.sleep(0.1)"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == client.CodeEventStdout {
			break
		}
	}
	start := time.Now()
	ex, err := c.InterruptCode(ctx, id, s.ExecutionID())
	if err != nil || ex.ID != s.ExecutionID() {
		t.Fatalf("interrupt: %+v %v", ex, err)
	}
	r, err := collectCell(s)
	if err != nil || r.err == nil || r.err.Name != "KeyboardInterrupt" || r.end != client.CodeEventEnd || time.Since(start) > 15*time.Second {
		t.Fatalf("after interrupt (%s): %v %s", time.Since(start), err, r)
	}
	execs, err := c.ListExecutions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range execs {
		if e.ID == s.ExecutionID() && (e.State != "done" || e.EndedAt == nil) {
			t.Fatalf("interrupted execution listed as %+v", e)
		}
	}
	// Interrupting it again does nothing.
	if _, err := c.InterruptCode(ctx, id, s.ExecutionID()); err != nil {
		t.Fatal(err)
	}
}

// badInput: 4xx JSON errors, and nothing ran.
func badInput(t *testing.T, d *harness.Daemon, c *client.Client, id string) {
	ctx := harness.Ctx(t, time.Minute)
	before, err := c.ListExecutions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body, lastID string
		status                     int
		msg                        string
	}{
		{"POST", "/code", `{}`, "", 400, "code is required"},
		{"POST", "/code", `{"code":"1","timeout_seconds":86401}`, "", 400, "timeout_seconds"},
		{"POST", "/code", `{"code":"1","language":"python","context_id":"x"}`, "", 400, "not both"},
		{"POST", "/code", `{"code":"1","language":"cobol"}`, "", 400, "not supported"},
		{"POST", "/code", `{"code":"1","context_id":"nosuchcontext"}`, "", 404, "context nosuchcontext not found in sandbox " + id},
		{"POST", "/code", `{"code":1}`, "", 400, "must be a string, not a number"},
		{"POST", "/code", `{"code":"1","envs":{}}`, "", 400, "unknown field"},
		{"GET", "/code/nosuchexecution/events", ``, "", 404, "execution nosuchexecution not found in sandbox " + id},
		{"GET", "/code/nosuchexecution/events", ``, "x", 400, "not an event id"},
		{"POST", "/code/nosuchexecution/interrupt", ``, "", 404, "execution nosuchexecution not found"},
		{"POST", "/contexts", `{"cwd":"/no/such/dir"}`, "", 400, "cwd"},
		{"POST", "/contexts", `{"language":"cobol"}`, "", 400, "not supported"},
		{"DELETE", "/contexts/nosuchcontext", ``, "", 404, "context nosuchcontext not found"},
		{"POST", "/contexts/nosuchcontext/restart", ``, "", 404, "context nosuchcontext not found"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, tc.method, "http://"+d.Addr+"/v1/sandboxes/"+id+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+d.APIKey)
			if tc.lastID != "" {
				req.Header.Set("Last-Event-ID", tc.lastID)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), tc.msg) {
				t.Fatalf("%d %s, want %d %q", resp.StatusCode, b, tc.status, tc.msg)
			}
		})
	}
	after, err := c.ListExecutions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("bad requests started executions: %d before, %d after", len(before), len(after))
	}
}
