package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

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

// TestRequestBodiesClosed: every JSON request body's object schemas (and
// the objects inside them) say additionalProperties: false, so the
// validator refuses a field the spec does not name, as the handlers'
// decoder always has. Maps (additionalProperties: a schema) are open by
// design.
func TestRequestBodiesClosed(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value.Content.Get("application/json") == nil {
				continue
			}
			checkClosed(t, method+" "+path, op.RequestBody.Value.Content.Get("application/json").Schema.Value, map[*openapi3.Schema]bool{})
		}
	}
}

func checkClosed(t *testing.T, where string, s *openapi3.Schema, seen map[*openapi3.Schema]bool) {
	t.Helper()
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	if s.Type.Is(openapi3.TypeObject) && len(s.Properties) > 0 {
		if ap := s.AdditionalProperties.Has; ap == nil || *ap {
			t.Errorf("%s: an object schema with properties %v does not say additionalProperties: false", where, keys(s.Properties))
		}
	}
	for name, p := range s.Properties {
		checkClosed(t, where+"."+name, p.Value, seen)
	}
	if s.Items != nil {
		checkClosed(t, where+"[]", s.Items.Value, seen)
	}
}

func keys(m openapi3.Schemas) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestSpecBodiesDecode sends each operation a JSON body with every
// property its spec schema names (a valid sample of each) and fails if
// the handler's own decoder refuses one as unknown or of the wrong type:
// the handler's request type lacks a field the spec (and so the
// validator) lets through, or types it differently.
func TestSpecBodiesDecode(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Sandboxes: &recordingSandboxes{}, Tenants: testTenants(t, "k"), Metrics: http.NotFoundHandler()})
	param := regexp.MustCompile(`\{[^}]+\}`)
	decoderWords := regexp.MustCompile(`unknown field|must be [a-z0-9.\[\]]+, not |malformed JSON`)
	sent := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value.Content.Get("application/json") == nil {
				continue
			}
			body, _ := json.Marshal(sample(op.RequestBody.Value.Content.Get("application/json").Schema.Value))
			req := httptest.NewRequest(method, param.ReplaceAllString(path, "5"), strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer k")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			sent++
			var e errorBody
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code == http.StatusBadRequest && decoderWords.MatchString(e.Error.Message) {
				t.Errorf("%s %s: the handler refuses a body the spec allows: %s\n%s", method, path, e.Error.Message, body)
			}
		}
	}
	if sent < 20 {
		t.Fatalf("only %d operations with JSON bodies", sent)
	}
}

// sample answers a value the schema accepts with every property set.
func sample(s *openapi3.Schema) any {
	if s == nil {
		return nil
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	switch {
	case s.Type.Is(openapi3.TypeObject):
		out := map[string]any{}
		for name, p := range s.Properties {
			out[name] = sample(p.Value)
		}
		if len(s.Properties) == 0 && s.AdditionalProperties.Schema != nil {
			out["K"] = sample(s.AdditionalProperties.Schema.Value)
		}
		return out
	case s.Type.Is(openapi3.TypeArray):
		if s.Items == nil {
			return []any{}
		}
		return []any{sample(s.Items.Value)}
	case s.Type.Is(openapi3.TypeInteger), s.Type.Is(openapi3.TypeNumber):
		if s.Min != nil {
			return *s.Min
		}
		return 1
	case s.Type.Is(openapi3.TypeBoolean):
		return true
	case s.Type.Is(openapi3.TypeString):
		if s.Format == "date-time" {
			return "2026-01-02T03:04:05Z"
		}
		return "a1"
	}
	return nil
}
