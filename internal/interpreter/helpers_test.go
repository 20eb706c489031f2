package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
)

func TestMain(m *testing.M) {
	// Keepalives are ignored by the SDKs; often enough here that a test
	// sees them without waiting 5 s.
	keepaliveEvery = 300 * time.Millisecond
	os.Exit(m.Run())
}

// testServer is a Server behind an httptest listener.
type testServer struct {
	*Server
	URL string
}

var (
	sharedOnce sync.Once
	shared     *testServer
	sharedErr  string
)

// sharedServer is one server for the tests that need nothing special; each
// uses contexts of its own, or the default context for stateless cells.
func sharedServer(t *testing.T) *testServer {
	t.Helper()
	python, deno := interpretertest.Python(t), interpretertest.Deno(t)
	sharedOnce.Do(func() {
		s, err := New(Config{Python: python, Deno: deno, Cwd: os.TempDir(), Logger: testLogger(), KernelAddressSpace: 0})
		if err != nil {
			sharedErr = err.Error()
			return
		}
		s.Start()
		if err := s.Err(); err != nil {
			sharedErr = err.Error()
			return
		}
		ts := httptest.NewServer(s.Handler())
		shared = &testServer{Server: s, URL: ts.URL}
	})
	if shared == nil {
		t.Fatalf("shared server: %s", sharedErr)
	}
	return shared
}

// startServer starts a server of the test's own with cfg (Python, Deno
// and a logger filled in), stopped at the test's end.
func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	return startServerWith(t, cfg, nil)
}

// startServerWith is startServer with prepare run on the server between
// New and Start (nil: nothing), for a test that swaps a part's input.
func startServerWith(t testing.TB, cfg Config, prepare func(*Server)) *testServer {
	t.Helper()
	cfg.Python, cfg.Deno = interpretertest.Python(t), interpretertest.Deno(t)
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	if cfg.Cwd == "" {
		cfg.Cwd = t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(s)
	}
	s.Start()
	if err := s.Err(); err != nil {
		s.Close()
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		s.Close()
	})
	return &testServer{Server: s, URL: ts.URL}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// line is one decoded NDJSON line.
type line map[string]any

func (l line) typ() string         { s, _ := l["type"].(string); return s }
func (l line) str(k string) string { s, _ := l[k].(string); return s }

// lines is an execution's output.
type lines []line

func (ls lines) of(typ string) lines {
	var out lines
	for _, l := range ls {
		if l.typ() == typ {
			out = append(out, l)
		}
	}
	return out
}

func (ls lines) stdout() string {
	var b strings.Builder
	for _, l := range ls.of("stdout") {
		b.WriteString(l.str("text"))
	}
	return b.String()
}

func (ls lines) mainText() string {
	for _, l := range ls.of("result") {
		if l["is_main_result"] == true {
			return l.str("text")
		}
	}
	return ""
}

func (ls lines) errorName() string {
	if e := ls.of("error"); len(e) > 0 {
		return e[len(e)-1].str("name")
	}
	return ""
}

func (ls lines) last() string {
	if len(ls) == 0 {
		return ""
	}
	return ls[len(ls)-1].typ()
}

// execute runs body through POST /execute and returns its lines; it fails
// t on a status other than 200.
func (s *testServer) execute(t testing.TB, body map[string]any) lines {
	t.Helper()
	ls, status, msg := s.tryExecute(context.Background(), body, nil)
	if status != http.StatusOK {
		t.Fatalf("execute %v: %d %s", body, status, msg)
	}
	return ls
}

// tryExecute is execute that returns the status, and hands each line to
// each (if not nil) as it arrives.
func (s *testServer) tryExecute(ctx context.Context, body map[string]any, each func(line)) (lines, int, string) {
	resp, err := s.do(ctx, "POST", "/execute", body, nil)
	if err != nil {
		return nil, 0, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, string(msg)
	}
	var out lines
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return out, resp.StatusCode, "bad line: " + sc.Text()
		}
		if each != nil {
			each(l)
		}
		out = append(out, l)
	}
	return out, resp.StatusCode, ""
}

func (s *testServer) do(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	return http.DefaultClient.Do(req)
}

// call makes a JSON request and decodes a 200's body into out (if not
// nil); it returns the status and body text.
func (s *testServer) call(t testing.TB, method, path string, body, out any) (int, string) {
	t.Helper()
	resp, err := s.do(context.Background(), method, path, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

// newContext creates a python context and removes it when the test ends.
func (s *testServer) newContext(t testing.TB, cwd string) string {
	t.Helper()
	return s.newLangContext(t, "python", cwd)
}

// newLangContext creates a context of lang and removes it when the test
// ends.
func (s *testServer) newLangContext(t testing.TB, lang, cwd string) string {
	t.Helper()
	var c struct{ ID, Language, Cwd string }
	body := map[string]any{"language": lang}
	if cwd != "" {
		body["cwd"] = cwd
	}
	if status, msg := s.call(t, "POST", "/contexts", body, &c); status != http.StatusOK {
		t.Fatalf("create context: %d %s", status, msg)
	}
	t.Cleanup(func() { s.call(t, "DELETE", "/contexts/"+c.ID, nil, nil) })
	return c.ID
}
