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
