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

// quotasJSON are a tenant's quotas as the API answers them (a quota left
// at 0 is left out).
func quotasJSON(q store.Quotas) *native.Quotas {
	return &native.Quotas{Sandboxes: opt(q.Sandboxes), Vcpu: opt(q.VCPU), MemoryMb: opt(q.MemoryMB), Builds: opt(q.Builds),
		PausedSandboxes: opt(q.PausedSandboxes), PausedMb: opt(q.PausedMB), Snapshots: opt(q.Snapshots), SnapshotMb: opt(q.SnapshotMB),
		Templates: opt(q.Templates), TemplateMb: opt(q.TemplateMB), CreatesPerSecond: opt(q.CreatesPerSecond), CreatesBurst: opt(q.CreatesBurst)}
}

// quotasOf are a request's quotas (one left out: 0, the node's default).
func quotasOf(q *native.Quotas) store.Quotas {
	if q == nil {
		return store.Quotas{}
	}
	return store.Quotas{Sandboxes: deref(q.Sandboxes), VCPU: deref(q.Vcpu), MemoryMB: deref(q.MemoryMb), Builds: deref(q.Builds),
		PausedSandboxes: deref(q.PausedSandboxes), PausedMB: deref(q.PausedMb), Snapshots: deref(q.Snapshots), SnapshotMB: deref(q.SnapshotMb),
		Templates: deref(q.Templates), TemplateMB: deref(q.TemplateMb), CreatesPerSecond: deref(q.CreatesPerSecond), CreatesBurst: deref(q.CreatesBurst)}
}

// tenantJSON is a tenant as the API answers it: effective_quotas are the
// quotas that apply (the node's defaults filled in).
func (s *Server) tenantJSON(r *http.Request, t *store.Tenant, withUsage bool) (native.Tenant, error) {
	out := native.Tenant{Id: ptr(t.ID), Name: opt(t.Name), CreatedAt: ptr(t.CreatedAt), Quotas: quotasJSON(t.Quotas), EffectiveQuotas: quotasJSON(s.tenants.Quotas(t.ID))}
	if withUsage {
		u, err := s.tenants.Usage(r.Context(), t.ID)
		if err != nil {
			return out, err
		}
		out.Usage = &native.Usage{Sandboxes: ptr(u.Sandboxes), Vcpu: ptr(u.VCPU), MemoryMb: ptr(u.MemoryMB), Builds: ptr(u.Builds),
			PausedSandboxes: ptr(u.PausedSandboxes), PausedMb: ptr(u.PausedMB), Snapshots: ptr(u.Snapshots), SnapshotMb: ptr(u.SnapshotMB),
			Templates: ptr(u.Templates), TemplateMb: ptr(u.TemplateMB)}
	}
	return out, nil
}

func (s *Server) CreateTenant(w http.ResponseWriter, r *http.Request) {
	var req native.CreateTenantJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tenants.CreateTenant(r.Context(), req.Id, deref(req.Name), quotasOf(req.Quotas))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, _ := s.tenantJSON(r, t, false)
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) ListTenants(w http.ResponseWriter, r *http.Request) {
	out := []native.Tenant{}
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
	var q native.SetTenantQuotasJSONRequestBody
	if err := decodeJSON(w, r, &q, false); err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.tenants.SetQuotas(r.Context(), tenantID, quotasOf(&q))
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

func toKeyJSON(k *store.APIKey) native.APIKey {
	return native.APIKey{Id: ptr(k.ID), Tenant: ptr(k.Tenant), Name: opt(k.Name), CreatedAt: ptr(k.CreatedAt), RevokedAt: opt(k.RevokedAt)}
}

func (s *Server) IssueKey(w http.ResponseWriter, r *http.Request, tenantID string) {
	var req native.IssueKeyJSONRequestBody
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	key, k, err := s.tenants.IssueKey(r.Context(), tenantID, deref(req.Name))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := toKeyJSON(k)
	out.Key = opt(key)
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
	out := []native.APIKey{}
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
	out := make([]native.AuditEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, native.AuditEntry{Time: ptr(e.Time), Tenant: ptr(e.Tenant), Key: ptr(e.Key), Method: ptr(e.Method), Route: ptr(e.Route),
			Object: opt(e.Object), Created: opt(e.Created), Status: ptr(e.Status), Remote: opt(e.Remote)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out})
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
