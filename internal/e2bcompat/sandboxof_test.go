package e2bcompat

import (
	"net/http/httptest"
	"testing"
)

func TestSandboxOf(t *testing.T) {
	for _, tc := range []struct {
		method, target, host string
		header               map[string]string
		want                 string
	}{
		{"GET", "/sandboxes/abc123", "api.e2b.test", nil, "abc123"},
		{"POST", "/v2/sandboxes/abc123/connect", "api.e2b.test", nil, "abc123"},
		{"GET", "/sandboxes/metrics", "api.e2b.test", nil, ""},
		{"GET", "/sandboxes", "api.e2b.test", nil, ""},
		{"GET", "/templates/abc", "api.e2b.test", nil, ""},
		{"GET", "/sandboxes/Bad-Id", "api.e2b.test", nil, ""},
		{"POST", "/process.Process/Start", "49983-abc123.e2b.test", nil, "abc123"},
		{"GET", "/", "8080-abc123.e2b.test:3000", nil, "abc123"},
		{"POST", "/filesystem.Filesystem/Stat", "localhost", map[string]string{"E2b-Sandbox-Id": "abc123"}, "abc123"},
	} {
		r := httptest.NewRequest(tc.method, "http://"+tc.host+tc.target, nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := SandboxOf(r); got != tc.want {
			t.Errorf("%s %s (host %s): %q, want %q", tc.method, tc.target, tc.host, got, tc.want)
		}
	}
}

func TestBuildOf(t *testing.T) {
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/templates/app/builds/b-1/status", "b-1"},
		{"GET", "/templates/app/builds/b-1/status?logsOffset=3", "b-1"},
		{"POST", "/templates/app/builds/b-1/status", ""},
		{"GET", "/templates/app/builds/b-1", ""},
		{"GET", "/templates/app/builds//status", ""},
		{"GET", "/sandboxes/abc/builds/b-1/status", ""},
	} {
		if got := BuildOf(httptest.NewRequest(tc.method, tc.path, nil)); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
