package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/coderun"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// The fuzz targets drive the real handlers over a real sandbox.Service with
// an empty store and no templates: every request parses as it would in
// spaced, and any request that gets past parsing ends at "not found". So
// the properties are about parsing: never a 5xx or a panic for client
// input, and every refusal a JSON error body.

const fuzzKey = "fuzz-key"

const fuzzMaxTimeout = 24 * time.Hour

// checkTimeoutRange turns on the oracles for out-of-range timeout_seconds.
// It is off until createSandbox and setTimeout (sandboxes.go) refuse
// seconds that overflow a time.Duration: 18446744075 s becomes 1.29 s and
// passes validation (docs/fuzzing.md, findings). Turn it on with the fix.
const checkTimeoutRange = true

// codeNames are the error codes each client-error status may carry.
var codeNames = map[int]string{
	400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
	409: "already_exists failed_precondition", 429: "resource_exhausted", 507: "resource_exhausted",
}

func fuzzServer(f *testing.F) http.Handler {
	f.Helper()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	st, err := store.OpenBolt(filepath.Join(f.TempDir(), "state.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	svc := sandbox.New(sandbox.Config{
		Templates: noTemplates{}, DefaultTimeout: 5 * time.Minute, MaxTimeout: fuzzMaxTimeout,
		Defaults: runtime.Limits{CPUs: 1, MemoryMB: 512, DiskMB: 1024, MaxProcs: 1024},
	}, st, nil, nil)
	sec, err := secrets.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	targets := sandbox.NewTargets(svc)
	return New(Options{Sandboxes: svc, Changes: sandbox.NewFeed(st), Checkpoints: svc.Checkpoints(), Snapshots: svc.Snapshots(), Commands: sandbox.NewCommands(targets, nil), Files: sandbox.NewFiles(targets), Secrets: sec, Code: coderun.New(coderun.Options{Target: targets.Target}), Tenants: testTenants(f, fuzzKey), MaxUpload: 1 << 20, Metrics: http.NotFoundHandler()})
}

// serve runs one request through h; the request must not panic out of
// the handler (the server's recovery turns a panic into a 500, which the
// callers' checks catch).
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	req.Header.Set("Authorization", "Bearer "+fuzzKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkAnswer asserts the properties every answer to client input has.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d for client input: %s", what, rec.Code, rec.Body.Bytes())
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: error with content type %q", what, ct)
	}
	var e errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("%s: error body %q is not JSON: %v", what, rec.Body.Bytes(), err)
	}
	if e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s: error body %q without code or message", what, rec.Body.Bytes())
	}
	if want, ok := codeNames[rec.Code]; ok && !strings.Contains(want, e.Error.Code) {
		t.Fatalf("%s: status %d with error code %q, want one of %s", what, rec.Code, e.Error.Code, want)
	}
}

// strictDecode is the reference decoder the oracles use: what the API's
// strict JSON decoding should accept.
func strictDecode(body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false
	}
	return !dec.More()
}

func FuzzCreateSandboxBody(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"template":"base"}`, `{"template":"Base!"}`, `{"timeout_seconds":60}`,
		`{"timeout_seconds":-1}`, `{"timeout_seconds":86401}`, `{"timeout_seconds":1e3}`,
		`{"timeout_seconds":"60"}`, `{"env":{"A":"b"}}`, `{"env":{"1A":"b"}}`, `{"metadata":{"":"x"}}`,
		`{"cpu":1,"memory_mb":512,"disk_mb":1024,"max_processes":64}`, `{"cpu":65}`, `{"memory_mb":-5}`,
		`{"pool":false}`, `{"pool":null}`, `{"unknown":1}`, `{} {}`, `[]`, `null`, `{"template":`,
		`{"timeout_seconds":9223372036}`, `{"timeout_seconds":92233720369}`,
	} {
		f.Add([]byte(seed))
	}
	h := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(h, httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body)))
		checkAnswer(t, "create", rec)
		if rec.Code < 400 {
			t.Fatalf("create succeeded without templates: %d %s", rec.Code, rec.Body.Bytes())
		}
		// A timeout outside 0 (the default) .. the maximum is refused,
		// however it is written.
		var req native.CreateSandboxRequest
		if checkTimeoutRange && strictDecode(body, &req) && (deref(req.TimeoutSeconds) < 0 || deref(req.TimeoutSeconds) > int(fuzzMaxTimeout/time.Second)) && rec.Code != http.StatusBadRequest {
			t.Fatalf("timeout_seconds %d answered %d, want 400: %s", deref(req.TimeoutSeconds), rec.Code, rec.Body.Bytes())
		}
	})
}

// fuzzBodyRoutes are the JSON-body endpoints under a sandbox.
var fuzzBodyRoutes = []string{"timeout", "commands", "commands/7/stdin", "commands/7/signal", "files/mkdir", "files/move"}

func FuzzSandboxJSONBodies(f *testing.F) {
	for i, seed := range []string{
		`{"timeout_seconds":60}`, `{"cmd":"echo hi"}`, `{"data":"x","eof":true}`, `{"signal":"SIGKILL"}`,
		`{"path":"/tmp/x"}`, `{"source":"/a","destination":"/b"}`,
		`{"timeout_seconds":0}`, `{"argv":["ls","-l"],"cmd":"ls"}`, `{"base64":"!!","data":""}`, `{"signal":"SIGHUP"}`,
		`{"path":"a\u0000b"}`, `{"source":""}`, `{"cmd":"x","timeout_seconds":604801}`, `{"argv":[""]}`,
		`{"timeout_seconds":18446744075}`, `{"stdin":"x","keep_stdin_open":true,"background":true,"tag":"t"}`,
	} {
		f.Add(uint8(i%len(fuzzBodyRoutes)), []byte(seed))
	}
	h := fuzzServer(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := "/v1/sandboxes/nosuchsandbox/" + fuzzBodyRoutes[int(route)%len(fuzzBodyRoutes)]
		rec := serve(h, httptest.NewRequest("POST", path, bytes.NewReader(body)))
		checkAnswer(t, path, rec)
		// There is no sandbox: input that parses ends at 404, anything
		// else is the caller's mistake.
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
			t.Fatalf("%s: status %d, want 400 or 404: %s", path, rec.Code, rec.Body.Bytes())
		}
		var req struct {
			TimeoutSeconds int `json:"timeout_seconds"`
		}
		if checkTimeoutRange && strings.HasSuffix(path, "/timeout") && strictDecode(body, &req) &&
			(req.TimeoutSeconds < 0 || req.TimeoutSeconds > int(fuzzMaxTimeout/time.Second)) && rec.Code != http.StatusBadRequest {
			t.Fatalf("timeout_seconds %d answered %d, want 400", req.TimeoutSeconds, rec.Code)
		}
	})
}

// FuzzPathAndQuery fuzzes the ids, pids, query parameters and the
// Last-Event-ID header of the GET endpoints.
func FuzzPathAndQuery(f *testing.F) {
	tok := func(o int) string {
		raw, _ := json.Marshal(map[string]any{"t": time.Unix(int64(o), 0), "id": "sb" + strconv.Itoa(o)})
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	for _, s := range []struct{ id, pid, query, lastID string }{
		{"abc", "1", "path=/home/user&depth=2", ""},
		{"abc", "0", "path=", "5"},
		{"abc", "4294967296", "path=%00", "-1"},
		{"..", "-1", "state=running,lost&metadata=a=b&limit=10", "18446744073709551616"},
		{"x y", "1e3", "state=bogus&limit=0&page_token=" + tok(3), "1"},
		{"abc", "7", "page_token=" + tok(-1) + "&metadata=nokey", ""},
		{"abc", "7", "page_token=" + tok(1<<62) + "&limit=1000", ""},
		{"abc", "7", "page_token=" + tok(math.MaxInt64) + "&limit=5", ""},
		{"abc", "7", "page_token=%%%&after=3&recursive=maybe&depth=65", ""},
	} {
		f.Add(s.id, s.pid, s.query, s.lastID)
	}
	h := fuzzServer(f)
	f.Fuzz(func(t *testing.T, id, pid, query, lastID string) {
		base := "/v1/sandboxes/" + url.PathEscape(id)
		for _, p := range []string{
			"/v1/sandboxes", base, base + "/commands", base + "/commands/" + url.PathEscape(pid) + "/events",
			base + "/files", base + "/files/list", base + "/files/stat", base + "/files/watch",
		} {
			req, err := http.NewRequest("GET", p+"?"+query, nil)
			if err != nil {
				return // not a URL a client could send
			}
			if lastID != "" && !strings.ContainsAny(lastID, "\r\n\x00") {
				req.Header.Set("Last-Event-ID", lastID)
			}
			rec := serve(h, req)
			checkAnswer(t, p+"?"+query, rec)
			if p != "/v1/sandboxes" || rec.Code != http.StatusOK {
				continue
			}
			// The list is empty; a next page token, if any, must be one the
			// list accepts again.
			var page struct {
				Sandboxes     []json.RawMessage `json:"sandboxes"`
				NextPageToken string            `json:"next_page_token"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || page.Sandboxes == nil {
				t.Fatalf("list body %q: %v", rec.Body.Bytes(), err)
			}
			if page.NextPageToken != "" {
				again := serve(h, httptest.NewRequest("GET", "/v1/sandboxes?page_token="+url.QueryEscape(page.NextPageToken), nil))
				if again.Code != http.StatusOK {
					t.Fatalf("an empty list handed out next_page_token %q, which answers %d", page.NextPageToken, again.Code)
				}
			}
		}
	})
}

// noTemplates knows no template: the fuzzed requests never reach a boot.
type noTemplates struct{}

func (noTemplates) Resolve(_ context.Context, ref string) (*sandbox.Image, error) {
	return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", ref)
}

func (noTemplates) ImageRoot(template, _ string) (string, error) {
	return "", errdefs.New(errdefs.ErrNotFound, "template %q not found", template)
}
