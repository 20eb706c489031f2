package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBadInput: a request the API cannot serve as written is refused with
// a 4xx and a JSON error that names the problem, before anything reaches
// the sandbox service (bad input changes nothing). Most are refused by the
// validator of api/openapi.yaml (contract.go), the rest by the handlers'
// own checks of what the spec cannot say. The cases that need a
// real sandbox or the service's own checks (unknown sandboxes, files and
// pids; limits beyond the node's) are in test/e2e.
func TestBadInput(t *testing.T) {
	const sb = "/v1/sandboxes/sb1"
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code, says               string
	}{
		{name: "unknown route", method: "GET", path: "/v1/nothing", status: 404, code: "not_found", says: "no route"},

		// Creates.
		{name: "malformed JSON", method: "POST", path: "/v1/sandboxes", body: `{"template":`, says: "JSON"},
		{name: "not an object", method: "POST", path: "/v1/sandboxes", body: `[1,2]`, says: "array"},
		{name: "trailing data", method: "POST", path: "/v1/sandboxes", body: `{} {}`, says: "JSON"},
		{name: "unknown field", method: "POST", path: "/v1/sandboxes", body: `{"tempalte":"base"}`, says: "tempalte"},
		{name: "wrong type", method: "POST", path: "/v1/sandboxes", body: `{"memory_mb":"lots"}`, says: "memory_mb"},
		{name: "negative memory", method: "POST", path: "/v1/sandboxes", body: `{"memory_mb":-1}`, says: "negative"},
		{name: "negative timeout", method: "POST", path: "/v1/sandboxes", body: `{"timeout_seconds":-5}`, says: "negative"},
		{name: "bad state filter", method: "GET", path: "/v1/sandboxes?state=zombie", says: "zombie"},

		// Commands.
		{name: "command: cmd and argv", method: "POST", path: sb + "/commands", body: `{"cmd":"true","argv":["true"]}`, says: "either cmd or argv"},
		{name: "command: neither", method: "POST", path: sb + "/commands", body: `{}`, says: "cmd or argv is required"},
		{name: "command: empty program", method: "POST", path: sb + "/commands", body: `{"argv":[""]}`, says: "cmd or argv is required"},
		{name: "command: malformed JSON", method: "POST", path: sb + "/commands", body: `{"cmd":`, says: "JSON"},
		{name: "command: negative timeout", method: "POST", path: sb + "/commands", body: `{"cmd":"true","timeout_seconds":-1}`, says: "timeout_seconds"},
		{name: "command: timeout over a week", method: "POST", path: sb + "/commands", body: `{"cmd":"true","timeout_seconds":604801}`, says: "timeout_seconds"},
		{name: "events: pid not a number", method: "GET", path: sb + "/commands/abc/events", says: "pid"},
		{name: "events: pid 0", method: "GET", path: sb + "/commands/0/events", says: "pid"},
		{name: "events: bad Last-Event-ID", method: "GET", path: sb + "/commands/5/events", header: map[string]string{"Last-Event-ID": "x"}, says: "Last-Event-ID"},
		{name: "events: bad after", method: "GET", path: sb + "/commands/5/events?after=-1", says: `after "-1" must not be negative`},
		{name: "stdin: data and base64", method: "POST", path: sb + "/commands/5/stdin", body: `{"data":"a","base64":"YQ=="}`, says: "either data or base64"},
		{name: "stdin: bad base64", method: "POST", path: sb + "/commands/5/stdin", body: `{"base64":"%%%"}`, says: "base64"},
		{name: "stdin: bad pid", method: "POST", path: sb + "/commands/-1/stdin", body: `{"data":"a"}`, says: "pid"},
		{name: "signal: unknown", method: "POST", path: sb + "/commands/5/signal", body: `{"signal":"SIGHUP"}`, says: `field "signal" must be one of SIGTERM, SIGKILL`},
		{name: "signal: bad pid", method: "POST", path: sb + "/commands/x/signal", body: `{"signal":"SIGTERM"}`, says: "pid"},
		{name: "pty: cols 0", method: "GET", path: sb + "/pty?cols=0", says: "cols"},
		{name: "pty: rows too many", method: "GET", path: sb + "/pty?rows=1001", says: "rows"},

		// Files.
		{name: "download: no path", method: "GET", path: sb + "/files", says: "path"},
		{name: "upload: no path", method: "PUT", path: sb + "/files", body: "x", says: "path"},
		{name: "remove: no path", method: "DELETE", path: sb + "/files", says: "path"},
		{name: "stat: NUL in path", method: "GET", path: sb + "/files/stat?path=a%00b", says: "NUL"},
		{name: "list: depth 0", method: "GET", path: sb + "/files/list?path=/&depth=0", says: "depth"},
		{name: "list: depth 65", method: "GET", path: sb + "/files/list?path=/&depth=65", says: "depth"},
		{name: "list: depth not a number", method: "GET", path: sb + "/files/list?path=/&depth=deep", says: "depth"},
		{name: "mkdir: no path", method: "POST", path: sb + "/files/mkdir", body: `{}`, says: "path is required"},
		{name: "move: no destination", method: "POST", path: sb + "/files/move", body: `{"source":"a"}`, says: "destination is required"},
		{name: "watch: no path", method: "GET", path: sb + "/files/watch", says: "path"},

		// Telemetry.
		{name: "metrics: bad start", method: "GET", path: sb + "/metrics?start=yesterday", says: "RFC 3339"},
		{name: "metrics: negative end", method: "GET", path: sb + "/metrics?end=-5", says: "RFC 3339"},
		{name: "logs: bad cursor", method: "GET", path: sb + "/logs?cursor=soon", says: "RFC 3339"},
		{name: "logs: limit 0", method: "GET", path: sb + "/logs?limit=0", says: "limit"},
		{name: "logs: limit not a number", method: "GET", path: sb + "/logs?limit=many", says: "limit"},
		{name: "logs: bad direction", method: "GET", path: sb + "/logs?direction=sideways", says: "direction"},
		{name: "logs: bad level", method: "GET", path: sb + "/logs?level=loud", says: "level"},
		{name: "logs: follow not a boolean", method: "GET", path: sb + "/logs?follow=always", says: "follow"},
		{name: "logs: follow backward", method: "GET", path: sb + "/logs?follow=true&direction=backward", says: "backward"},
		{name: "events: metrics not a boolean", method: "GET", path: "/v1/events?metrics=some", says: "metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &recordingSandboxes{}
			rec := serveFake(t, fake, tc.method, tc.path, tc.body, tc.header)
			status, code := tc.status, tc.code
			if status == 0 {
				status, code = http.StatusBadRequest, "invalid_argument"
			}
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("%d, body is not a JSON error (%v): %q", rec.Code, err, rec.Body)
			}
			if rec.Code != status || body.Error.Code != code {
				t.Errorf("got %d %s, want %d %s (%q)", rec.Code, body.Error.Code, status, code, body.Error.Message)
			}
			if !strings.Contains(body.Error.Message, tc.says) {
				t.Errorf("message %q does not say %q", body.Error.Message, tc.says)
			}
			if calls := fake.Calls(); len(calls) > 0 {
				t.Errorf("bad input reached the sandbox service: %v", calls)
			}
		})
	}
}

// TestBadInputControl: the same requests, put right, do reach the fake, so
// TestBadInput's "not called" means something.
func TestBadInputControl(t *testing.T) {
	for _, tc := range []struct{ method, path, body, want string }{
		{"POST", "/v1/sandboxes", `{"memory_mb":512}`, "Create"},
		{"POST", "/v1/sandboxes/sb1/commands", `{"cmd":"true","timeout_seconds":604800}`, "StartCommand"},
		{"GET", "/v1/sandboxes/sb1/commands/5/events?after=3", "", "AttachCommand"},
		{"POST", "/v1/sandboxes/sb1/commands/5/stdin", `{"base64":"YQ=="}`, "SendStdin"},
		// Nothing to write still asks for the command (404 when it is gone).
		{"POST", "/v1/sandboxes/sb1/commands/5/stdin", `{}`, "SendStdin"},
		{"POST", "/v1/sandboxes/sb1/commands/5/stdin", `{"eof":true}`, "CloseStdin"},
		{"POST", "/v1/sandboxes/sb1/commands/5/signal", `{"signal":"KILL"}`, "SignalCommand"},
		{"GET", "/v1/sandboxes/sb1/files/list?path=/&depth=64", "", "ListDir"},
		{"GET", "/v1/sandboxes/sb1/logs?level=warn&direction=backward", "", "Logs"},
		{"GET", "/v1/sandboxes/sb1/logs?level=warn&follow=1", "", "FollowLogs"},
	} {
		fake := &recordingSandboxes{}
		rec := serveFake(t, fake, tc.method, tc.path, tc.body, nil)
		if calls := fake.Calls(); len(calls) != 1 || calls[0] != tc.want || rec.Code != http.StatusNotFound {
			t.Errorf("%s %s: %d, calls %v, want 404 after one %s", tc.method, tc.path, rec.Code, calls, tc.want)
		}
	}
}

// serveFake serves one request with an admin key over fake.
func serveFake(t *testing.T, fake *recordingSandboxes, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	h := New(Options{Sandboxes: fake, Changes: fake, Checkpoints: fake, Snapshots: fake, Keys: fake, Commands: fake, Files: fake, Telemetry: fake, Tenants: testTenants(t, "k"), Metrics: http.NotFoundHandler()})
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
