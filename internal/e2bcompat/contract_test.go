package e2bcompat

import (
	"strings"
	"testing"
)

// TestValidatedFromE2BSpec: requests into the E2B routes are checked
// against E2B's own spec and refused 400 in E2B's error shape, naming the
// field; a field the spec does not list passes (the SDKs add some), and a
// valid request goes on to its handler (the positive control).
func TestValidatedFromE2BSpec(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"required", "POST", "/sandboxes", map[string]any{"timeout": 30}, "templateID is required"},
		{"type", "POST", "/sandboxes", map[string]any{"templateID": 5}, `field "templateID" must be a string, not a number`},
		{"range", "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": -1}, `field "timeout" must not be negative`},
		{"boolean", "POST", "/sandboxes", map[string]any{"templateID": "base", "autoPause": "yes"}, `field "autoPause" must be a boolean, not a string`},
		{"timeout", "POST", "/sandboxes/nosuch/timeout", map[string]any{}, "timeout is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := wantError(t, h.api(tc.method, tc.path, tc.body), 400)
			if !strings.Contains(e.Message, tc.want) {
				t.Errorf("message %q, want it to say %q", e.Message, tc.want)
			}
		})
	}
	// Not in E2B's spec: let through, as newer SDKs send such fields.
	resp := h.api("POST", "/sandboxes", map[string]any{"templateID": "base", "fieldNoSpecHas": true})
	if resp.StatusCode != 201 {
		t.Fatalf("create with a field the spec lacks: %d %s", resp.StatusCode, readAll(resp))
	}
}

// TestE2BRoutesInSpec: every E2B route is found in E2B's spec (so it is
// validated) but those it does not describe: spaced's own volume content
// and signed upload routes, /templates/{a}/{b} (two of the spec's paths),
// the v2 create and connect that the pinned SDKs call but the pinned
// spec predates, and the lifecycle webhooks, which E2B documents but its
// spec lacks (their handlers check their bodies: webhooks.go).
func TestE2BRoutesInSpec(t *testing.T) {
	spec, err := loadE2BSpec()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	var missing []string
	for _, rt := range s.routeTable(true) {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if specPath(spec, method, path) == "" {
			missing = append(missing, rt.pattern)
		}
	}
	notInSpec := map[string]bool{
		"GET /templates/{a}/{b}": true, "PUT /templates/{id}/files/{hash}/upload": true,
		"POST /v2/sandboxes": true, "POST /v2/sandboxes/{id}/connect": true,
		"POST /events/webhooks": true, "GET /events/webhooks": true, "GET /events/webhooks/{id}": true,
		"PATCH /events/webhooks/{id}": true, "DELETE /events/webhooks/{id}": true,
	}
	for _, m := range missing {
		if !strings.Contains(m, "/volumecontent/") && !notInSpec[m] {
			t.Errorf("%s is not in api/e2b/openapi.yml: it is not validated", m)
		}
	}
	if len(missing) > len(notInSpec)+10 {
		t.Errorf("%d routes are not in the spec: %v", len(missing), missing)
	}
}
