package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/spacesandbox/space/api/native"
)

// The router is generated from api/openapi.yaml and *Server must implement
// every operation of it (this does not compile otherwise), so a route in
// the spec is a route served, with the path and query parameters the spec
// gives it.
var _ native.ServerInterface = (*Server)(nil)

// TestEveryOperationAuthenticated walks the spec's operations: each one
// without an API key answers 401 with the JSON error body, except those
// the spec marks public ("security: []"), which must not. The chain in
// front of each route is built from its operation, so this fails when the
// two drift apart (a route served without authentication).
func TestEveryOperationAuthenticated(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Sandboxes: &recordingSandboxes{}, Tenants: testTenants(t, "k"), Metrics: http.NotFoundHandler()})
	param := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			n++
			url := param.ReplaceAllString(path, "5")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, url, strings.NewReader("{}")))
			public := op.Security != nil && len(*op.Security) == 0
			if public {
				if rec.Code == http.StatusUnauthorized {
					t.Errorf("%s %s is public in the spec but answers 401", method, path)
				}
				continue
			}
			var body errorBody
			if rec.Code != http.StatusUnauthorized || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != "unauthenticated" {
				t.Errorf("%s %s without a key: %d %q, want 401 unauthenticated", method, path, rec.Code, rec.Body)
			}
		}
	}
	if n < 80 {
		t.Fatalf("only %d operations in the spec", n)
	}
}
