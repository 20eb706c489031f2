package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/coderun"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// codeServer serves the API's code routes over a coderun client whose
// sandbox "sb" is interp, a stand-in for the interpreter's wire (the real
// one is tested in test/interpreter).
func codeServer(t *testing.T, interp http.HandlerFunc) (http.Handler, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		interp(w, r)
	}))
	t.Cleanup(fake.Close)
	code := coderun.New(coderun.Options{
		Target: func(id string) (sandbox.Target, error) {
			if id != "sb" {
				return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
			}
			return sandbox.Target{ID: id, IP: netip.MustParseAddr("10.0.0.7"), AccessToken: "tok"}, nil
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, fake.Listener.Addr().String())
		},
	})
	s := &Server{log: slog.New(slog.DiscardHandler), code: code, tenants: testTenants(t, "k"), owners: defaultOwner{}, metrics: http.NotFoundHandler()}
	return s.routes(), &seen
}

func doCode(h http.Handler, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRunCodeSSE(t *testing.T) {
	h, seen := codeServer(t, func(w http.ResponseWriter, r *http.Request) {
		for _, l := range []string{
			`{"seq":1,"type":"execution","id":"ex-1"}`,
			`{"seq":2,"type":"stdout","text":"a\n","timestamp":"t"}`,
			`{"seq":2,"type":"keepalive"}`,
			`{"seq":3,"type":"result","text":"2","html":"<b>2</b>","is_main_result":true}`,
			`{"seq":4,"type":"end_of_execution"}`,
		} {
			io.WriteString(w, l+"\n")
		}
	})
	rec := doCode(h, "POST", "/v1/sandboxes/sb/code", `{"code":"1+1","env":{"A":"b"},"timeout_seconds":5}`)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	want := "id: 1\nevent: execution\ndata: {\"seq\":1,\"type\":\"execution\",\"id\":\"ex-1\"}\n\n" +
		"id: 2\nevent: stdout\ndata: {\"seq\":2,\"type\":\"stdout\",\"text\":\"a\\n\",\"timestamp\":\"t\"}\n\n" +
		"id: 3\nevent: result\ndata: {\"seq\":3,\"type\":\"result\",\"text\":\"2\",\"html\":\"<b>2</b>\",\"is_main_result\":true}\n\n" +
		"id: 4\nevent: end_of_execution\ndata: {\"seq\":4,\"type\":\"end_of_execution\"}\n\n"
	if rec.Body.String() != want {
		t.Fatalf("stream:\n%s\nwant:\n%s", rec.Body, want)
	}
	if got := strings.Join(*seen, "|"); got != "POST /executions" {
		t.Fatalf("interpreter saw %s", got)
	}
}

func TestCodeEventsResume(t *testing.T) {
	h, seen := codeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") == "3" {
			io.WriteString(w, `{"seq":4,"type":"stdout","text":"x"}`+"\n")
			return // cut before the end line
		}
		io.WriteString(w, `{"seq":9,"type":"end_of_execution"}`+"\n")
	})
	rec := doCode(h, "GET", "/v1/sandboxes/sb/code/ex-1/events", "", "Last-Event-ID", "3")
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(body, "id: 4\nevent: stdout\n") || !strings.Contains(body, "event: stream_error\ndata: {\"message\":") {
		t.Fatalf("%d:\n%s", rec.Code, body)
	}
	if rec := doCode(h, "GET", "/v1/sandboxes/sb/code/ex-1/events?after=8", ""); !strings.HasPrefix(rec.Body.String(), "id: 9\nevent: end_of_execution\n") {
		t.Fatalf("after=8:\n%s", rec.Body)
	}
	if got := strings.Join(*seen, "|"); got != "GET /executions/ex-1/events?after=3|GET /executions/ex-1/events?after=8" {
		t.Fatalf("interpreter saw %s", got)
	}
}

func TestCodeBadInput(t *testing.T) {
	h, seen := codeServer(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("reached the interpreter: %s", r.URL) })
	for _, tc := range []struct {
		method, path, body string
		header             []string
		status             int
		msg                string
	}{
		{"POST", "/v1/sandboxes/sb/code", ``, nil, 400, "request body is empty"},
		{"POST", "/v1/sandboxes/sb/code", `{}`, nil, 400, "code is required"},
		{"POST", "/v1/sandboxes/sb/code", `{"code":1}`, nil, 400, `field "code"`},
		{"POST", "/v1/sandboxes/sb/code", `{"code":"1","cmd":"x"}`, nil, 400, "unknown field"},
		{"POST", "/v1/sandboxes/sb/code", `{"code":"1","timeout_seconds":86401}`, nil, 400, "timeout_seconds"},
		{"POST", "/v1/sandboxes/sb/code", `{"code":"1","timeout_seconds":-1}`, nil, 400, "timeout_seconds"},
		{"POST", "/v1/sandboxes/sb/code", `{"code":"1","language":"python","context_id":"c"}`, nil, 400, "not both"},
		{"POST", "/v1/sandboxes/sb/code", `{"code":"1","env":{"A=B":"c"}}`, nil, 400, "env var name"},
		{"POST", "/v1/sandboxes/other/code", `{"code":"1"}`, nil, 404, `sandbox "other" not found`},
		{"GET", "/v1/sandboxes/sb/code/ex-1/events", ``, []string{"Last-Event-ID", "x"}, 400, "not an event id"},
		{"GET", "/v1/sandboxes/sb/code/ex-1/events?after=-1", ``, nil, 400, "after"},
		{"GET", "/v1/sandboxes/sb/code/a%20b/events", ``, nil, 400, `execution "a b" does not match`},
		{"POST", "/v1/sandboxes/sb/code/a%20b/interrupt", ``, nil, 400, `execution "a b" does not match`},
		{"POST", "/v1/sandboxes/sb/contexts", `{"language":1}`, nil, 400, `field "language"`},
		{"POST", "/v1/sandboxes/sb/contexts", `{"cwd":"/tmp","x":1}`, nil, 400, "unknown field"},
		{"DELETE", "/v1/sandboxes/sb/contexts/a~b", ``, nil, 400, `context "a~b" does not match`},
		{"POST", "/v1/sandboxes/sb/contexts/a.b/restart", ``, nil, 400, `context "a.b" does not match`},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.body, func(t *testing.T) {
			rec := doCode(h, tc.method, tc.path, tc.body, tc.header...)
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != tc.status || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("%d %s, want %d %q", rec.Code, rec.Body, tc.status, tc.msg)
			}
		})
	}
	if len(*seen) != 0 {
		t.Fatalf("the interpreter saw %v", *seen)
	}
}

func TestCodeContextsAndList(t *testing.T) {
	h, _ := codeServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "GET /contexts":
			io.WriteString(w, `[{"id":"c-1","language":"python","cwd":"/home/user"}]`)
		case "POST /contexts":
			io.WriteString(w, `{"id":"c-2","language":"python","cwd":"/tmp"}`)
		case "DELETE /contexts/c-2", "POST /contexts/c-2/restart":
			io.WriteString(w, "null")
		case "GET /executions":
			io.WriteString(w, `[{"id":"ex-1","context_id":"c-1","state":"running","started_at":"2026-12-01T03:03:41Z","ended_at":null}]`)
		case "POST /executions/ex-1/interrupt":
			io.WriteString(w, `{"id":"ex-1","context_id":"c-1","state":"done","started_at":"2026-12-01T03:03:41Z","ended_at":"2026-12-01T03:03:42Z"}`)
		default:
			http.Error(w, "Context c-9 not found!", 404)
		}
	})
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/v1/sandboxes/sb/contexts", "", 200, `{"contexts":[{"id":"c-1","language":"python","cwd":"/home/user"}]}`},
		{"POST", "/v1/sandboxes/sb/contexts", `{"cwd":"/tmp"}`, 201, `{"id":"c-2","language":"python","cwd":"/tmp"}`},
		{"POST", "/v1/sandboxes/sb/contexts", ``, 201, `{"id":"c-2","language":"python","cwd":"/tmp"}`},
		{"DELETE", "/v1/sandboxes/sb/contexts/c-2", "", 204, ``},
		{"POST", "/v1/sandboxes/sb/contexts/c-2/restart", "", 204, ``},
		{"DELETE", "/v1/sandboxes/sb/contexts/c-9", "", 404, `{"error":{"code":"not_found","message":"context c-9 not found in sandbox sb"}}`},
		{"GET", "/v1/sandboxes/sb/code", "", 200, `{"executions":[{"id":"ex-1","context_id":"c-1","state":"running","started_at":"2026-12-01T03:03:41Z"}]}`},
		{"POST", "/v1/sandboxes/sb/code/ex-1/interrupt", "", 200, `{"id":"ex-1","context_id":"c-1","state":"done","started_at":"2026-12-01T03:03:41Z","ended_at":"2026-12-01T03:03:42Z"}`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := doCode(h, tc.method, tc.path, tc.body)
			if rec.Code != tc.status || strings.TrimSpace(rec.Body.String()) != tc.want {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
}

// defaultOwner says every sandbox is the default tenant's.
type defaultOwner struct{}

func (defaultOwner) Owner(context.Context, string) (string, bool) { return tenant.Default, true }

// testTenants is a tenant service whose admin key is key.
func testTenants(t testing.TB, key string) *tenant.Service {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := tenant.New(context.Background(), st, key, store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
