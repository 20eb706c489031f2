package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spacesandbox/space/internal/store"
)

// TestMetricsGate: /metrics names every tenant, so it answers the admin
// key and the metrics token only; a tenant's key gets 403, no key or a
// wrong token 401.
func TestMetricsGate(t *testing.T) {
	tenants := testTenants(t, "admin-key")
	ctx := context.Background()
	if _, err := tenants.CreateTenant(ctx, "acme", "", store.Quotas{}); err != nil {
		t.Fatal(err)
	}
	acme, _, err := tenants.IssueKey(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "space_tenant_sandboxes 1\n") })
	for _, token := range []string{"", "the-metrics-token-0123"} {
		h := New(Options{Sandboxes: &recordingSandboxes{}, Tenants: tenants, Metrics: metrics, MetricsToken: token})
		for _, tc := range []struct {
			name, header, value string
			status              int
		}{
			{"no key", "", "", http.StatusUnauthorized},
			{"a wrong key", "Authorization", "Bearer nope", http.StatusUnauthorized},
			{"a tenant's key", "Authorization", "Bearer " + acme, http.StatusForbidden},
			{"a tenant's key in X-API-Key", "X-API-Key", acme, http.StatusForbidden},
			{"the admin key", "Authorization", "Bearer admin-key", http.StatusOK},
			{"the metrics token", "Authorization", "Bearer the-metrics-token-0123", map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[token != ""]},
			{"the token's prefix", "Authorization", "Bearer the-metrics-token", http.StatusUnauthorized},
		} {
			req := httptest.NewRequest("GET", "/metrics", nil)
			if tc.header != "" {
				req.Header.Set(tc.header, tc.value)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Errorf("token set %v, %s: %d %s, want %d", token != "", tc.name, rec.Code, rec.Body, tc.status)
			}
			if (rec.Code == http.StatusOK) != (rec.Body.String() == "space_tenant_sandboxes 1\n") {
				t.Errorf("token set %v, %s: body %q", token != "", tc.name, rec.Body)
			}
		}
	}
}
