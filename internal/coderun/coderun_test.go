package coderun

import (
	"github.com/spacesandbox/space/internal/accesstoken"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// fakeInterpreter plays the interpreter's wire (docs/code-interpreter.md)
// for these unit tests only; test/interpreter runs the real one.
type fakeInterpreter struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []string // "METHOD path?query"
	bodies   []map[string]any
	tokens   []string
	handle   http.HandlerFunc
}

const token = "tok-1"

// interpreterToken is what the interpreter gets: never the access token.
var interpreterToken = accesstoken.Interpreter(token)

func newFake(t *testing.T, handle http.HandlerFunc) (*fakeInterpreter, *Client) {
	f := &fakeInterpreter{t: t, handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		f.bodies = append(f.bodies, body)
		f.tokens = append(f.tokens, r.Header.Get("X-Access-Token"))
		f.mu.Unlock()
		f.handle(w, r)
	}))
	t.Cleanup(f.srv.Close)
	addr := f.srv.Listener.Addr().String()
	c := New(Options{
		Target: targets,
		Dial: func(ctx context.Context, network, a string) (net.Conn, error) {
			if a != "10.0.0.7:49999" {
				return nil, fmt.Errorf("dialled %s", a)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		MaxLineBytes: 1024,
	})
	return f, c
}

func targets(id string) (sandbox.Target, error) {
	if id != "sb" {
		return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is killed", id)
	}
	return sandbox.Target{ID: id, IP: netip.MustParseAddr("10.0.0.7"), AccessToken: token}, nil
}

func (f *fakeInterpreter) last() (string, map[string]any, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return "", nil, ""
	}
	n := len(f.requests) - 1
	return f.requests[n], f.bodies[n], f.tokens[n]
}

func (f *fakeInterpreter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func ndjson(w http.ResponseWriter, lines ...string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, l := range lines {
		io.WriteString(w, l+"\n")
		w.(http.Flusher).Flush()
	}
}

// readAll reads a stream to its end.
func readAll(s *Stream) ([]Line, error) {
	var out []Line
	for {
		l, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, l)
	}
}

func seqs(lines []Line) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%d:%s ", l.Seq, l.Type)
	}
	return strings.TrimSpace(b.String())
}

func TestExecute(t *testing.T) {
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		ndjson(w,
			`{"seq":1,"type":"execution","id":"ex-1"}`,
			`{"seq":2,"type":"number_of_executions","execution_count":1}`,
			`{"seq":3,"type":"stdout","text":"a\n","timestamp":"2026-12-01T03:03:39.841309Z"}`,
			`{"seq":3,"type":"keepalive"}`,
			``,
			`{"seq":4,"type":"result","text":"2","is_main_result":true}`,
			`{"seq":5,"type":"end_of_execution"}`,
			`{"seq":6,"type":"stdout","text":"after the end"}`,
		)
	})
	s, err := c.Execute(context.Background(), "sb", ExecuteRequest{
		Code: "print('a')\n1+1", Env: map[string]string{"K": "v"}, TimeoutSeconds: 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ExecutionID() != "ex-1" {
		t.Fatalf("execution id %q", s.ExecutionID())
	}
	lines, err := readAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(lines); got != "1:execution 2:number_of_executions 3:stdout 4:result 5:end_of_execution" {
		t.Fatalf("lines %s", got)
	}
	if lines[0].ExecutionID != "ex-1" || string(lines[3].Raw) != `{"seq":4,"type":"result","text":"2","is_main_result":true}` {
		t.Fatalf("lines %+v", lines)
	}
	req, body, tok := f.last()
	if req != "POST /executions" || tok != interpreterToken {
		t.Fatalf("request %s with token %q", req, tok)
	}
	want := map[string]any{"code": "print('a')\n1+1", "language": "python", "env_vars": map[string]any{"K": "v"}, "timeout": float64(30)}
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Fatalf("body %v, want %v", body, want)
	}

	// A context instead of a language.
	if s, err := c.Execute(context.Background(), "sb", ExecuteRequest{Code: "x", ContextID: "c-1"}); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	if _, body, _ := f.last(); fmt.Sprint(body) != fmt.Sprint(map[string]any{"code": "x", "context_id": "c-1"}) {
		t.Fatalf("body %v", body)
	}
}

func TestEvents(t *testing.T) {
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("after") {
		case "9":
			ndjson(w) // it had the end line already
		case "2":
			ndjson(w, `{"seq":7,"type":"gap","dropped":5}`, `{"seq":8,"type":"stdout","text":"x"}`, `{"seq":9,"type":"end_of_execution"}`)
		default:
			ndjson(w, `{"seq":3,"type":"stdout","text":"x"}`) // then the connection ends
		}
	})
	for _, tc := range []struct {
		after uint64
		want  string
		err   string
	}{
		{9, "", ""},
		{2, "7:gap 8:stdout 9:end_of_execution", ""},
		{1, "3:stdout", "ended execution ex-1's stream before its end"},
	} {
		t.Run(fmt.Sprint("after ", tc.after), func(t *testing.T) {
			s, err := c.Events(context.Background(), "sb", "ex-1", tc.after)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			lines, err := readAll(s)
			if got := seqs(lines); got != tc.want {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (!errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.PublicMessage(err), tc.err)):
				t.Fatalf("err %v, want Unavailable %q", err, tc.err)
			}
			if req, _, tok := f.last(); req != fmt.Sprintf("GET /executions/ex-1/events?after=%d", tc.after) || tok != interpreterToken {
				t.Fatalf("request %s, token %q", req, tok)
			}
		})
	}
}

func TestStreamLimits(t *testing.T) {
	for _, tc := range []struct {
		name, line, err string
	}{
		{"too long", `{"seq":2,"type":"stdout","text":"` + strings.Repeat("x", 2000) + `"}`, "longer than 1024 bytes"},
		{"not JSON", `hello`, "not its JSON"},
		{"no seq", `{"type":"stdout","text":"x"}`, "without a seq"},
		{"cut mid-line", `{"seq":2,"type":"std`, "broke off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				ndjson(w, `{"seq":1,"type":"execution","id":"ex-1"}`)
				if tc.name == "cut mid-line" {
					io.WriteString(w, tc.line)
					return
				}
				ndjson(w, tc.line)
			})
			s, err := c.Execute(context.Background(), "sb", ExecuteRequest{Code: "x"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			lines, err := readAll(s)
			if len(lines) != 1 || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(errdefs.PublicMessage(err), tc.err) {
				t.Fatalf("lines %s, err %v (%q), want %q", seqs(lines), err, errdefs.PublicMessage(err), tc.err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		call   func(c *Client) error
		class  error
		msg    string
	}{
		{"bad request", 400, "Only one of context_id or language can be provided\n",
			execute(ExecuteRequest{Code: "x", Language: "r"}), errdefs.ErrInvalidArgument, "Only one of context_id or language can be provided"},
		{"unknown context", 404, "Context c-9 not found!\n",
			execute(ExecuteRequest{Code: "x", ContextID: "c-9"}), errdefs.ErrNotFound, "context c-9 not found in sandbox sb"},
		{"unknown execution", 404, "Execution ex-9 not found\n",
			func(c *Client) error { _, err := c.Events(context.Background(), "sb", "ex-9", 0); return err },
			errdefs.ErrNotFound, "execution ex-9 not found in sandbox sb"},
		{"interrupt unknown", 404, "Execution ex-9 not found\n",
			func(c *Client) error { _, err := c.Interrupt(context.Background(), "sb", "ex-9"); return err },
			errdefs.ErrNotFound, "execution ex-9 not found in sandbox sb"},
		{"delete unknown context", 404, "Context c-9 not found!\n",
			func(c *Client) error { return c.DeleteContext(context.Background(), "sb", "c-9") },
			errdefs.ErrNotFound, "context c-9 not found in sandbox sb"},
		{"no such route", 404, "404 page not found\n",
			func(c *Client) error { _, err := c.Executions(context.Background(), "sb"); return err },
			errdefs.ErrFailedPrecondition, "has no GET /executions"},
		{"token refused", 401, "invalid X-Access-Token\n",
			execute(ExecuteRequest{Code: "x"}), errdefs.ErrFailedPrecondition, "refused the sandbox's access token"},
		{"no state file", 503, "the sandbox's access token is not available\n",
			execute(ExecuteRequest{Code: "x"}), errdefs.ErrUnavailable, "is not ready: the sandbox's access token is not available"},
		{"kernel failed", 500, "could not start a python kernel: boom\n",
			func(c *Client) error {
				_, err := c.CreateContext(context.Background(), "sb", ContextRequest{})
				return err
			},
			errdefs.ErrUnavailable, "failed: could not start a python kernel: boom"},
		{"context cap", 429, `{"error":{"code":"resource_exhausted","message":"this code interpreter already has 8 contexts, its limit"}}` + "\n",
			func(c *Client) error {
				_, err := c.CreateContext(context.Background(), "sb", ContextRequest{})
				return err
			},
			errdefs.ErrResourceExhausted, "sandbox sb: this code interpreter already has 8 contexts, its limit"},
		{"teapot", 418, "",
			func(c *Client) error { _, err := c.Contexts(context.Background(), "sb"); return err },
			errdefs.ErrUnavailable, "answered HTTP 418"},
		{"not JSON", 200, "<html>",
			func(c *Client) error { _, err := c.Contexts(context.Background(), "sb"); return err },
			errdefs.ErrUnavailable, "not its JSON"},
		{"not an execution", 200, `{"seq":1,"type":"stdout","text":"x"}` + "\n",
			execute(ExecuteRequest{Code: "x"}), errdefs.ErrUnavailable, "did not start an execution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})
			err := tc.call(c)
			if !errors.Is(err, tc.class) || errdefs.Class(err) != tc.class {
				t.Fatalf("err %v, want class %v", err, tc.class)
			}
			if msg := errdefs.PublicMessage(err); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q, want %q", msg, tc.msg)
			}
		})
	}
}

func execute(req ExecuteRequest) func(c *Client) error {
	return func(c *Client) error {
		s, err := c.Execute(context.Background(), "sb", req)
		if err == nil {
			s.Close()
		}
		return err
	}
}

func TestUnreachable(t *testing.T) {
	// Nothing listens on 49999: the sandbox runs no interpreter.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	c := New(Options{Target: targets, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, closed)
	}})
	_, err = c.Execute(context.Background(), "sb", ExecuteRequest{Code: "1"})
	if errdefs.Class(err) != errdefs.ErrFailedPrecondition ||
		errdefs.PublicMessage(err) != "sandbox sb runs no code interpreter: create it from code-interpreter-v1 (or a template that starts space-interpreter on port 49999)" {
		t.Fatalf("err %v (%q)", err, errdefs.PublicMessage(err))
	}
	// A sandbox that is not running is the sandbox service's NotFound.
	_, err = c.Contexts(context.Background(), "gone")
	if errdefs.Class(err) != errdefs.ErrNotFound || errdefs.PublicMessage(err) != `sandbox "gone" is killed` {
		t.Fatalf("err %v", err)
	}
	// A cancelled call is the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Executions(ctx, "sb"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestValidate(t *testing.T) {
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("%s %s reached the interpreter", r.Method, r.URL)
	})
	long := strings.Repeat("x", maxEnvValueLen+1)
	for _, tc := range []struct {
		name string
		call func() error
		msg  string
	}{
		{"no code", func() error { return execute(ExecuteRequest{})(c) }, "code is required"},
		{"both", func() error { return execute(ExecuteRequest{Code: "1", Language: "python", ContextID: "c"})(c) }, "not both"},
		{"negative timeout", func() error { return execute(ExecuteRequest{Code: "1", TimeoutSeconds: -1})(c) }, "timeout_seconds"},
		{"long timeout", func() error { return execute(ExecuteRequest{Code: "1", TimeoutSeconds: 86401})(c) }, "timeout_seconds"},
		{"bad context id", func() error { return execute(ExecuteRequest{Code: "1", ContextID: "../x"})(c) }, "context id"},
		{"bad env name", func() error { return execute(ExecuteRequest{Code: "1", Env: map[string]string{"1A": "x"}})(c) }, "env var name"},
		{"long env value", func() error { return execute(ExecuteRequest{Code: "1", Env: map[string]string{"A": long}})(c) }, "env var A"},
		{"bad code", func() error { return execute(ExecuteRequest{Code: "\xff"})(c) }, "UTF-8"},
		{"bad execution id", func() error { _, err := c.Events(context.Background(), "sb", "a/b", 0); return err }, "execution id"},
		{"bad interrupt id", func() error { _, err := c.Interrupt(context.Background(), "sb", ""); return err }, "execution id"},
		{"bad context to delete", func() error { return c.DeleteContext(context.Background(), "sb", "a?b") }, "context id"},
		{"bad context to restart", func() error { return c.RestartContext(context.Background(), "sb", "..") }, "context id"},
		{"long language", func() error {
			_, err := c.CreateContext(context.Background(), "sb", ContextRequest{Language: strings.Repeat("p", 40)})
			return err
		}, "language"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if errdefs.Class(err) != errdefs.ErrInvalidArgument || !strings.Contains(errdefs.PublicMessage(err), tc.msg) {
				t.Fatalf("err %v, want InvalidArgument %q", err, tc.msg)
			}
		})
	}
	if n := f.count(); n != 0 {
		t.Fatalf("%d requests reached the interpreter", n)
	}
}

func TestContextsAndExecutions(t *testing.T) {
	f, c := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /contexts":
			io.WriteString(w, `[{"id":"c-1","language":"python","cwd":"/home/user"}]`)
		case "POST /contexts":
			io.WriteString(w, `{"id":"c-2","language":"python","cwd":"/tmp"}`)
		case "DELETE /contexts/c-2", "POST /contexts/c-1/restart":
			io.WriteString(w, "null\n")
		case "GET /executions":
			io.WriteString(w, `[{"id":"ex-1","context_id":"c-1","state":"done","started_at":"2026-12-01T03:03:39.799291674Z","ended_at":"2026-12-01T03:03:40Z"},`+
				`{"id":"ex-2","context_id":"c-1","state":"running","started_at":"2026-12-01T03:03:41Z","ended_at":null}]`)
		case "POST /executions/ex-2/interrupt":
			io.WriteString(w, `{"id":"ex-2","context_id":"c-1","state":"running","started_at":"2026-12-01T03:03:41Z","ended_at":null}`)
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()
	list, err := c.Contexts(ctx, "sb")
	if err != nil || len(list) != 1 || list[0] != (Context{"c-1", "python", "/home/user"}) {
		t.Fatalf("contexts %+v, %v", list, err)
	}
	made, err := c.CreateContext(ctx, "sb", ContextRequest{Cwd: "/tmp"})
	if err != nil || made.ID != "c-2" {
		t.Fatalf("create %+v, %v", made, err)
	}
	if _, body, _ := f.last(); fmt.Sprint(body) != "map[cwd:/tmp]" {
		t.Fatalf("create body %v", body)
	}
	if err := c.DeleteContext(ctx, "sb", "c-2"); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartContext(ctx, "sb", "c-1"); err != nil {
		t.Fatal(err)
	}
	execs, err := c.Executions(ctx, "sb")
	if err != nil || len(execs) != 2 || execs[0].EndedAt == nil || execs[1].EndedAt != nil || execs[1].State != "running" {
		t.Fatalf("executions %+v, %v", execs, err)
	}
	ex, err := c.Interrupt(ctx, "sb", "ex-2")
	if err != nil || ex.ID != "ex-2" {
		t.Fatalf("interrupt %+v, %v", ex, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := "GET /contexts|POST /contexts|DELETE /contexts/c-2|POST /contexts/c-1/restart|GET /executions|POST /executions/ex-2/interrupt"
	if got := strings.Join(f.requests, "|"); got != want {
		t.Fatalf("requests %s", got)
	}
	for _, tok := range f.tokens {
		if tok != interpreterToken {
			t.Fatalf("token %q", tok)
		}
	}
}
