package store

import (
	"context"
	"time"
)

// Tenant is one owner of sandboxes, templates, snapshots, volumes, secrets
// and customer keys. Its API keys are APIKey records.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Quotas override the node's defaults where set (see Quotas).
	Quotas Quotas `json:"quotas"`
}

// Quotas bound what one tenant may hold at once. Zero means "the node's
// default"; a negative value means no limit.
type Quotas struct {
	// Sandboxes running (or resuming) at once.
	Sandboxes int `json:"sandboxes,omitempty"`
	// VCPU and MemoryMB: the sum of the limits of its running sandboxes.
	VCPU     int `json:"vcpu,omitempty"`
	MemoryMB int `json:"memory_mb,omitempty"`
	// Builds: template builds queued or running at once. A build's
	// sandboxes are not among Sandboxes; its vCPUs and memory count in
	// VCPU and MemoryMB from its submission to its end.
	Builds int `json:"builds,omitempty"`
	// PausedSandboxes: paused sandboxes kept at once (each holds its
	// checkpoint in the object store); PausedMB: the MiB their
	// checkpoints take there.
	PausedSandboxes int `json:"paused_sandboxes,omitempty"`
	PausedMB        int `json:"paused_mb,omitempty"`
	// Snapshots and SnapshotMB: disk and full snapshots kept, and the MiB
	// they take in the object store.
	Snapshots  int `json:"snapshots,omitempty"`
	SnapshotMB int `json:"snapshot_mb,omitempty"`
	// Templates and TemplateMB: templates, and the MiB of the builds
	// their tags point at.
	Templates  int `json:"templates,omitempty"`
	TemplateMB int `json:"template_mb,omitempty"`
	// CreatesPerSecond bounds creates, resumes and forks (a token bucket
	// of that rate with a burst of CreatesBurst).
	CreatesPerSecond float64 `json:"creates_per_second,omitempty"`
	CreatesBurst     int     `json:"creates_burst,omitempty"`
}

// APIKey is an issued API key. Only the key's SHA-256 is kept; the key
// itself is shown once, when it is issued.
type APIKey struct {
	// ID is the key's public prefix (what lists and audit lines show).
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// AuditEntry is one state-changing API call.
type AuditEntry struct {
	Time   time.Time `json:"time"`
	Tenant string    `json:"tenant"`
	// Key is the public prefix of the key that made the call.
	Key    string `json:"key"`
	Method string `json:"method"`
	Route  string `json:"route"`
	// Object is the ID or name the call named (empty for a create; the
	// result's ID is in Created).
	Object  string `json:"object,omitempty"`
	Created string `json:"created,omitempty"`
	Status  int    `json:"status"`
	Remote  string `json:"remote,omitempty"`
	// Cursor is where the entry is in the log, set by Audit: a query with
	// After set to it resumes after this entry, even when others share its
	// time. Opaque, and not kept in the entry itself.
	Cursor string `json:"-"`
}

// AuditQuery selects audit entries: those in [From, To), after the entry
// whose Cursor is After (if set), oldest first, at most Limit.
type AuditQuery struct {
	From, To time.Time
	After    string
	Limit    int
}

// Tenants keeps tenants, their API keys and the audit log.
type Tenants interface {
	// CreateTenant writes a new tenant (ErrAlreadyExists if the ID is taken).
	CreateTenant(ctx context.Context, t *Tenant) error
	UpdateTenant(ctx context.Context, t *Tenant) error
	GetTenant(ctx context.Context, id string) (*Tenant, error)
	ListTenants(ctx context.Context) ([]*Tenant, error)
	// CreateAPIKey writes a new key record (ErrAlreadyExists if its ID is
	// taken: a key record is never replaced).
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// RevokeAPIKey marks key id revoked at (if it is not already) and
	// returns the record (ErrNotFound if there is none).
	RevokeAPIKey(ctx context.Context, id string, at time.Time) (*APIKey, error)
	ListAPIKeys(ctx context.Context) ([]*APIKey, error)
	// AppendAudit adds entries; PruneAudit drops those older than before.
	AppendAudit(ctx context.Context, entries []AuditEntry) error
	// Audit returns the entries q selects, each with its Cursor.
	Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
	PruneAudit(ctx context.Context, before time.Time) (int, error)
}
