package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Tenants, their keys, usage and the audit log. /v1/admin/... needs the
// admin key (the chain checks it); /v1/usage is any key's own tenant's.

type tenantRequest struct {
	ID     string       `json:"id"`
	Name   string       `json:"name"`
	Quotas store.Quotas `json:"quotas"`
}

type tenantJSON struct {
	ID        string       `json:"id"`
	Name      string       `json:"name,omitempty"`
	CreatedAt time.Time    `json:"created_at"`
	Quotas    store.Quotas `json:"quotas"`
	// Effective are the quotas that apply (the node's defaults filled in).
	Effective store.Quotas  `json:"effective_quotas"`
	Usage     *tenant.Usage `json:"usage,omitempty"`
}

func (s *Server) tenantJSON(r *http.Request, t *store.Tenant, withUsage bool) (tenantJSON, error) {
	out := tenantJSON{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, Quotas: t.Quotas, Effective: s.tenants.Quotas(t.ID)}
	if withUsage {
		u, err := s.tenants.Usage(r.Context(), t.ID)
		if err != nil {
			return out, err
		}
		out.Usage = &u
	}
	return out, nil
}

func (s *Server) CreateTenant(w http.ResponseWriter, r *http.Request) {
	var req tenantRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tenants.CreateTenant(r.Context(), req.ID, req.Name, req.Quotas)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, _ := s.tenantJSON(r, t, false)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) ListTenants(w http.ResponseWriter, r *http.Request) {
	out := []tenantJSON{}
	for _, t := range s.tenants.Tenants() {
		tj, err := s.tenantJSON(r, t, true)
		if err != nil {
			writeError(w, r, err)
			return
		}
		out = append(out, tj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenants": out})
}

func (s *Server) GetTenant(w http.ResponseWriter, r *http.Request, tenantID string) {
	t, err := s.tenants.Tenant(tenantID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.tenantJSON(r, t, true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) SetTenantQuotas(w http.ResponseWriter, r *http.Request, tenantID string) {
	var q store.Quotas
	if err := decodeJSON(w, r, &q, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tenants.SetQuotas(r.Context(), tenantID, q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.tenantJSON(r, t, true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

type keyJSON struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Key is the key itself: in the answer to its issue only.
	Key string `json:"key,omitempty"`
}

func toKeyJSON(k *store.APIKey) keyJSON {
	return keyJSON{ID: k.ID, Tenant: k.Tenant, Name: k.Name, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

func (s *Server) IssueKey(w http.ResponseWriter, r *http.Request, tenantID string) {
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	key, k, err := s.tenants.IssueKey(r.Context(), tenantID, req.Name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := toKeyJSON(k)
	out.Key = key
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) ListAPIKeys(w http.ResponseWriter, r *http.Request) {
	s.listAPIKeys(w, r, "")
}

func (s *Server) ListTenantKeys(w http.ResponseWriter, r *http.Request, tenantID string) {
	if _, err := s.tenants.Tenant(tenantID); err != nil {
		writeError(w, r, err)
		return
	}
	s.listAPIKeys(w, r, tenantID)
}

// listAPIKeys lists tenant t's keys, every tenant's for "".
func (s *Server) listAPIKeys(w http.ResponseWriter, r *http.Request, t string) {
	keys, err := s.tenants.Keys(r.Context(), t)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []keyJSON{}
	for _, k := range keys {
		out = append(out, toKeyJSON(k))
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (s *Server) RevokeKey(w http.ResponseWriter, r *http.Request, key string) {
	k, err := s.tenants.RevokeKey(r.Context(), key)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toKeyJSON(k))
}

// auditLog answers the audit entries of a time window: ?from and ?to
// (RFC 3339; default the last hour), ?tenant, ?limit (default 1000).
func (s *Server) AuditLog(w http.ResponseWriter, r *http.Request, params native.AuditLogParams) {
	q := r.URL.Query()
	to, from := time.Now().Add(time.Second), time.Now().Add(-time.Hour)
	var err error
	parse := func(name string, dst *time.Time) {
		if v := q.Get(name); v != "" && err == nil {
			if *dst, err = time.Parse(time.RFC3339Nano, v); err != nil {
				err = errdefs.New(errdefs.ErrInvalidArgument, "%s must be an RFC 3339 time, like 2026-12-01T10:00:00Z", name)
			}
		}
	}
	parse("from", &from)
	parse("to", &to)
	limit := 1000
	if v := q.Get("limit"); v != "" && err == nil {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 10000 {
			err = errdefs.New(errdefs.ErrInvalidArgument, "limit must be from 1 to 10000")
		}
	}
	if err == nil && !from.Before(to) {
		err = errdefs.New(errdefs.ErrInvalidArgument, "from must be before to")
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	entries, err := s.audit.Query(r.Context(), from, to, q.Get("tenant"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if entries == nil {
		entries = []store.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
}

// usage answers the caller's tenant's quotas and what it holds.
func (s *Server) GetUsage(w http.ResponseWriter, r *http.Request) {
	t, err := s.tenants.Tenant(tenant.FromContext(r.Context()).Tenant)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.tenantJSON(r, t, true)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
