package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkValidate times what the spec's validation adds to a request
// before its handler, on the two hot routes (a create and a command),
// beside the same request served without it (the anchor).
func BenchmarkValidate(b *testing.B) {
	c, err := loadContract()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, pattern, path, body string }{
		{"create", "POST /v1/sandboxes", "/v1/sandboxes", `{"template":"base","timeout_seconds":600,"metadata":{"owner":"me"},"env":{"A":"1"}}`},
		{"command", "POST /v1/sandboxes/{id}/commands", "/v1/sandboxes/abcdefghij0123456789/commands", `{"cmd":"echo hi","env":{"A":"1"},"cwd":"/home/user"}`},
	} {
		op := c.operation(bc.pattern)
		if op == nil {
			b.Fatalf("no operation %s", bc.pattern)
		}
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		for _, v := range []struct {
			name string
			h    http.Handler
		}{{"bare", ok}, {"validated", c.validate(bc.pattern, op, ok)}} {
			mux := http.NewServeMux()
			mux.Handle(bc.pattern, v.h)
			b.Run(bc.name+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					w := httptest.NewRecorder()
					mux.ServeHTTP(w, httptest.NewRequest("POST", bc.path, strings.NewReader(bc.body)))
					if w.Code != http.StatusNoContent {
						b.Fatalf("%d %s", w.Code, w.Body)
					}
				}
			})
		}
	}
}
