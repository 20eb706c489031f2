package console

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/spacesandbox/space/api/native"
)

// The console's sources (web/console/src) call the native API through
// api.js: call(method, path), streamCall(method, path), and its helpers
// get, post, put and del. These tests read every such call whose path is
// written out (a string or template literal) and fail when api/openapi.yaml
// has no such method and path, so the console and the contract cannot
// drift apart unseen.

var (
	// methodCall: call("PUT", `/v1/...`) and streamCall("POST", "/v1/...").
	methodCall = regexp.MustCompile("\\b(?:call|streamCall)\\(\\s*\"([A-Z]+)\",\\s*([\"'`])(/[^\"'`]*)[\"'`]")
	// helperCall: get("/v1/..."), post(`/v1/...`), put(...), del(...).
	helperCall = regexp.MustCompile("\\b(get|post|put|del)\\(\\s*([\"'`])(/[^\"'`]*)[\"'`]")
	// apiPath: any other API path written out (an EventSource, a link).
	apiPath = regexp.MustCompile("[\"'`](/v1/[^\"'`?]*)")
	// placeholder: a template literal's ${...}.
	placeholder = regexp.MustCompile(`\$\{[^}]*\}`)
	specParam   = regexp.MustCompile(`\{[^}]+\}`)
)

var helperMethod = map[string]string{"get": "GET", "post": "POST", "put": "PUT", "del": "DELETE"}

type apiCall struct{ where, method, path string }

// consoleCalls finds the API calls in the console's sources; method is ""
// for a path written out elsewhere than in a call.
func consoleCalls(t *testing.T) []apiCall {
	t.Helper()
	var calls []apiCall
	err := filepath.WalkDir("../../web/console/src", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".jsx")) {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, m := range methodCall.FindAllStringSubmatch(string(src), -1) {
			calls = append(calls, apiCall{p, m[1], m[3]})
			seen[m[3]] = true
		}
		for _, m := range helperCall.FindAllStringSubmatch(string(src), -1) {
			calls = append(calls, apiCall{p, helperMethod[m[1]], m[3]})
			seen[m[3]] = true
		}
		for _, m := range apiPath.FindAllStringSubmatch(string(src), -1) {
			if !seen[m[1]] {
				calls = append(calls, apiCall{p, "", m[1]})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// specHas answers whether the spec has method on a path matching path
// (its ${...} placeholders stand for the spec's {parameters}); any method
// for "".
func specHas(spec *openapi3.T, method, path string) bool {
	path, _, _ = strings.Cut(path, "?")
	want := placeholder.ReplaceAllString(path, "{}")
	for p, item := range spec.Paths.Map() {
		if specParam.ReplaceAllString(p, "{}") != want {
			continue
		}
		if method == "" {
			return len(item.Operations()) > 0
		}
		return item.GetOperation(method) != nil
	}
	return false
}

func TestConsoleCallsAreInTheSpec(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	calls := consoleCalls(t)
	// The console makes dozens of calls: finding few means the patterns
	// above no longer match how api.js is called.
	if len(calls) < 30 {
		t.Fatalf("found only %d API calls in the console's sources: %v", len(calls), calls)
	}
	for _, c := range calls {
		if !specHas(spec, c.method, c.path) {
			t.Errorf("%s calls %s %s, which api/openapi.yaml does not have", c.where, c.method, c.path)
		}
	}
}

// TestSpecHasRefuses is the check's control: calls the spec lacks are
// found missing.
func TestSpecHasRefuses(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []apiCall{
		{method: "GET", path: "/v1/sandboxes/${id}"},
		{method: "POST", path: "/v1/sandboxes/${sb.id}/pause"},
		{method: "", path: "/v1/sandboxes/${id}/logs"},
	} {
		if !specHas(spec, c.method, c.path) {
			t.Errorf("%s %s: want found", c.method, c.path)
		}
	}
	for _, c := range []apiCall{
		{method: "PATCH", path: "/v1/sandboxes/${id}"},
		{method: "GET", path: "/v1/sandboxes/${id}/nosuch"},
		{method: "", path: "/v1/nosuch"},
		{method: "POST", path: "/v1/sandboxes/${id}/pause/${x}"},
	} {
		if specHas(spec, c.method, c.path) {
			t.Errorf("%s %s: found, but the spec has no such route", c.method, c.path)
		}
	}
}
