package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spacesandbox/space/client/apitypes"
)

// Quotas bound what a tenant may hold at once: 0 means the daemon's
// default, -1 no limit.
type Quotas = apitypes.Quotas

// Usage is what a tenant holds now (sizes in MiB, rounded up).
type Usage = apitypes.Usage

// Tenant owns sandboxes, templates, snapshots, volumes, secrets and keys.
type Tenant = apitypes.Tenant

// APIKey is an issued key; Key is set only in IssueKey's answer.
type APIKey = apitypes.APIKey

// AuditEntry is one state-changing API call.
type AuditEntry = apitypes.AuditEntry

// CreateTenant makes a tenant (admin key).
func (c *Client) CreateTenant(ctx context.Context, id, name string, q Quotas) (*Tenant, error) {
	var out Tenant
	in := struct {
		ID     string `json:"id"`
		Name   string `json:"name,omitempty"`
		Quotas Quotas `json:"quotas"`
	}{id, name, q}
	return &out, c.call(ctx, http.MethodPost, nil, in, &out, "v1", "admin", "tenants")
}

// ListTenants lists tenants with their usage (admin key).
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	var out struct {
		Tenants []Tenant `json:"tenants"`
	}
	return out.Tenants, c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "admin", "tenants")
}

// GetTenant returns one tenant (admin key).
func (c *Client) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	var out Tenant
	return &out, c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "admin", "tenants", id)
}

// SetQuotas replaces a tenant's quotas (admin key).
func (c *Client) SetQuotas(ctx context.Context, id string, q Quotas) (*Tenant, error) {
	var out Tenant
	return &out, c.call(ctx, http.MethodPut, nil, q, &out, "v1", "admin", "tenants", id, "quotas")
}

// IssueKey makes an API key of tenant (admin key); the answer's Key is
// the only copy.
func (c *Client) IssueKey(ctx context.Context, tenant, name string) (*APIKey, error) {
	var out APIKey
	in := struct {
		Name string `json:"name,omitempty"`
	}{name}
	return &out, c.call(ctx, http.MethodPost, nil, in, &out, "v1", "admin", "tenants", tenant, "keys")
}

// ListAPIKeys lists the keys of tenant, or every tenant's when empty
// (admin key).
func (c *Client) ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error) {
	var out struct {
		Keys []APIKey `json:"keys"`
	}
	segs := []string{"v1", "admin", "keys"}
	if tenant != "" {
		segs = []string{"v1", "admin", "tenants", tenant, "keys"}
	}
	return out.Keys, c.call(ctx, http.MethodGet, nil, nil, &out, segs...)
}

// RevokeKey revokes key id (its prefix) at once (admin key).
func (c *Client) RevokeKey(ctx context.Context, id string) (*APIKey, error) {
	var out APIKey
	return &out, c.call(ctx, http.MethodDelete, nil, nil, &out, "v1", "admin", "keys", id)
}

// AuditFilter selects audit entries; zero times mean the daemon's default
// window (the last hour).
type AuditFilter struct {
	From, To time.Time
	Tenant   string
	Limit    int
}

// Audit returns the state-changing calls of a time window (admin key).
func (c *Client) Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	q := url.Values{}
	if !f.From.IsZero() {
		q.Set("from", f.From.UTC().Format(time.RFC3339Nano))
	}
	if !f.To.IsZero() {
		q.Set("to", f.To.UTC().Format(time.RFC3339Nano))
	}
	if f.Tenant != "" {
		q.Set("tenant", f.Tenant)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out struct {
		Entries []AuditEntry `json:"entries"`
	}
	return out.Entries, c.call(ctx, http.MethodGet, q, nil, &out, "v1", "admin", "audit")
}

// Usage returns the caller's tenant with its quotas and usage.
func (c *Client) Usage(ctx context.Context) (*Tenant, error) {
	var out Tenant
	return &out, c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "usage")
}

// Node is a cluster node (cluster mode).
type Node = apitypes.Node

// Move is one sandbox's move in a drain.
type Move = apitypes.DrainMove

// DrainReport is what a drain did.
type DrainReport = apitypes.DrainReport

// Nodes lists the cluster's nodes (admin key; cluster mode).
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var out struct {
		Nodes []Node `json:"nodes"`
	}
	return out.Nodes, c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "admin", "nodes")
}

// DrainNode drains node: it takes no new sandboxes and its running ones
// move to other nodes. It answers when every move is done.
func (c *Client) DrainNode(ctx context.Context, node string) (*DrainReport, error) {
	out := new(DrainReport)
	return out, c.call(ctx, http.MethodPost, nil, nil, out, "v1", "admin", "nodes", node, "drain")
}

// UndrainNode lets node take sandboxes again.
func (c *Client) UndrainNode(ctx context.Context, node string) error {
	return c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "admin", "nodes", node, "drain")
}

// Pool is one warm pool of the node that answered.
type Pool = apitypes.Pool

// Pools lists the warm pools of the node that answers (admin key).
func (c *Client) Pools(ctx context.Context) ([]Pool, error) {
	var out struct {
		Pools []Pool `json:"pools"`
	}
	return out.Pools, c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "admin", "pools")
}

// SetPool sizes the warm pool of template on the node that answers until
// it restarts (admin key); max 0 empties it.
func (c *Client) SetPool(ctx context.Context, template string, min, max int) (*Pool, error) {
	out := new(Pool)
	in := map[string]int{"min": min, "max": max}
	return out, c.call(ctx, http.MethodPut, nil, in, out, "v1", "admin", "pools", template)
}
