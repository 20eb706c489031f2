// Package tenant says who is calling: tenants, their API keys (kept only
// as hashes), the principal a request runs as, per-tenant quotas and rate
// limits, and the audit log of state-changing calls.
//
// Every sandbox, template, build, snapshot, volume, secret and customer key
// belongs to one tenant. A key of one tenant sees only that tenant's
// objects: another tenant's ID answers exactly as an unknown one. The admin
// key (spaced's configured key) belongs to the default tenant, sees every
// tenant's objects, and alone manages tenants and keys.
package tenant

import "context"

// Default is the tenant of the admin key and of every object made before
// tenants existed.
const Default = "default"

// AdminKeyID is what audit lines name the admin key by.
const AdminKeyID = "admin"

// Principal is who a request runs as.
type Principal struct {
	Tenant string
	// Key is the public prefix of the API key used.
	Key   string
	Admin bool
}

// Admin is the principal of spaced's own calls and of the admin key.
var Admin = Principal{Tenant: Default, Key: AdminKeyID, Admin: true}

// Of returns t, or Default for an object made before tenants existed.
func Of(t string) string {
	if t == "" {
		return Default
	}
	return t
}

// Owns reports whether p may see and act on an object of tenant owner.
func (p Principal) Owns(owner string) bool {
	return p.Admin || Of(owner) == p.Tenant
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal of ctx. A context without one is
// spaced's own (the reaper, pools, recovery): it acts as Admin.
func FromContext(ctx context.Context) Principal {
	if p, ok := ctx.Value(ctxKey{}).(Principal); ok {
		return p
	}
	return Admin
}
