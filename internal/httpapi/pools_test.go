package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/sandbox"
)

type fakePools struct {
	set []string
}

func (f *fakePools) PoolStats() []sandbox.PoolStat {
	return []sandbox.PoolStat{{Template: "base", Ready: 2, Target: 2, Min: 2, Max: 8}}
}

func (f *fakePools) SetPool(template string, min, max int) (sandbox.PoolStat, error) {
	f.set = append(f.set, template)
	return sandbox.PoolStat{Template: template, Target: min, Min: min, Max: max}, nil
}

// TestPoolRoutes: the admin lists and sizes warm pools; a body without
// both sizes, or with unknown fields, is refused before the service sees
// it; a spaced without pools answers 404.
func TestPoolRoutes(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, body string
		noPools                  bool
		status                   int
		says                     string
		sets                     int
	}{
		{name: "list", method: "GET", path: "/v1/admin/pools", status: 200, says: `"max":8`},
		{name: "set", method: "PUT", path: "/v1/admin/pools/base", body: `{"min":110,"max":120}`, status: 200, says: `"min":110`, sets: 1},
		{name: "set without max", method: "PUT", path: "/v1/admin/pools/base", body: `{"min":1}`, status: 400, says: "max is required"},
		{name: "set unknown field", method: "PUT", path: "/v1/admin/pools/base", body: `{"min":1,"max":2,"size":3}`, status: 400, says: "size"},
		{name: "set not a number", method: "PUT", path: "/v1/admin/pools/base", body: `{"min":"a","max":2}`, status: 400, says: "min"},
		{name: "no pools", method: "GET", path: "/v1/admin/pools", noPools: true, status: 404, says: "no warm pools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fp := &fakePools{}
			o := Options{Sandboxes: &recordingSandboxes{}, Tenants: testTenants(t, "k"), Metrics: http.NotFoundHandler(), Pools: fp}
			if tc.noPools {
				o.Pools = nil
			}
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer k")
			rec := httptest.NewRecorder()
			New(o).ServeHTTP(rec, req)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("%s %s: %d %s, want %d with %q", tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.says)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Errorf("body is not JSON: %s", rec.Body)
			}
			if len(fp.set) != tc.sets {
				t.Errorf("SetPool called %d times, want %d", len(fp.set), tc.sets)
			}
		})
	}
}
