package httpapi

import (
	"net/http/httptest"
	"testing"
)

func TestSandboxOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/sandboxes/abc123":                   "abc123",
		"/v1/sandboxes/abc123/commands/7/events": "abc123",
		"/v1/sandboxes":                          "",
		"/v1/sandboxes/":                         "",
		"/v1/sandboxes/ABC":                      "",
		"/v1/snapshots/abc":                      "",
		"/ui/sandboxes/abc123":                   "",
	} {
		if got := SandboxOf(httptest.NewRequest("GET", path, nil)); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

func TestBuildOf(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/builds/b-1/logs", "b-1"},
		{"POST", "/v1/builds/b-1/cancel", "b-1"},
		{"GET", "/v1/builds/b-1", ""}, // the catalog answers
		{"POST", "/v1/builds/b-1/logs", ""},
		{"GET", "/v1/builds/b-1/cancel", ""},
		{"GET", "/v1/builds//logs", ""},
		{"GET", "/v1/builds", ""},
	} {
		if got := BuildOf(httptest.NewRequest(tc.method, tc.path, nil)); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
