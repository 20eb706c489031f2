package sandbox

import (
	"context"
	"maps"
	"sync"

	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// liveSet is the node's live sandboxes (running, pooled, template builds',
// frozen or hibernated at rest) and what creates, resumes, forks and
// builds in flight reserve of their tenants' quotas to become one. Both
// are under one lock: a burst of starts cannot pass a tenant's count
// together, and a reservation turns into its live entry under the same
// hold, so nothing is counted twice or missed (tenants.go).
//
// Never wait for an entry's lock while holding mu: end holds an entry's
// lock while it drops the entry. Callers take entries' locks only after a
// lookup or a listing returns.
type liveSet struct {
	mu      sync.Mutex
	entries map[string]*entry
	// reserved is what starts in flight hold of each tenant's quotas.
	reserved map[string]tenant.Usage

	// quotas returns a tenant's quotas (Config.Quotas; nil: none).
	quotas  func(tenant string) store.Quotas
	metrics *Metrics
	// rested gives an entry going live its rest (Service.attachRest).
	rested func(e *entry, frozen bool, image string)
	// changed tells the egress watchers, which serve live sandboxes only
	// (Service.egressChanged).
	changed func()
}

// newLiveSet is an empty live set; rested and changed are called as
// entries come and go (see liveSet).
func newLiveSet(quotas func(string) store.Quotas, m *Metrics, rested func(*entry, bool, string), changed func()) *liveSet {
	return &liveSet{entries: map[string]*entry{}, reserved: map[string]tenant.Usage{}, quotas: quotas, metrics: m, rested: rested, changed: changed}
}

// newLiveEntry is the entry of a sandbox that runs as rec from now on,
// counted against its tenant.
func newLiveEntry(rec *store.Sandbox, agent *AgentConn, ep network.Endpoint) *entry {
	return &entry{rec: rec, agent: agent, ep: ep, owner: tenant.Of(rec.Tenant), use: usageOf(rec.CPU, rec.MemoryMB)}
}

// entry is a live sandbox that callers may reach; a template build's
// sandbox is the build's alone.
func (l *liveSet) entry(id string) (*entry, bool) {
	e, ok := l.get(id)
	if !ok || e.build != "" {
		return nil, false
	}
	return e, true
}

// get is any live sandbox.
func (l *liveSet) get(id string) (*entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[id]
	return e, ok
}

// all are the live sandboxes as they are now.
func (l *liveSet) all() []*entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e)
	}
	return out
}

// byID are the live sandboxes as they are now, by id.
func (l *liveSet) byID() map[string]*entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.entries)
}

// count is the number of live sandboxes.
func (l *liveSet) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// add makes e a live sandbox and moves part of q into it under the same
// hold of the lock, so the tenant's usage counts it exactly once; then the
// egress watchers are told.
func (l *liveSet) add(e *entry, q *reservation, part tenant.Usage) {
	l.mu.Lock()
	l.entries[e.rec.ID] = e.published()
	l.rested(e, false, "")
	l.consumeLocked(q, part)
	l.mu.Unlock()
	l.changed()
}

// adopt makes e, found running after a restart, live again: frozen at
// rest, hibernated in image, or awake (image ""). The caller tells the
// egress watchers once every sandbox is back.
func (l *liveSet) adopt(e *entry, frozen bool, image string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries[e.rec.ID] = e
	l.rested(e, frozen, image)
}

// drop forgets live sandbox id and tells the egress watchers, not at
// once: the caller may hold the entry's lock, and the gateway's watcher
// reads every entry.
func (l *liveSet) drop(id string) {
	l.mu.Lock()
	delete(l.entries, id)
	l.mu.Unlock()
	go l.changed()
}

// reserve takes add from the quotas of ctx's tenant, or answers
// ErrQuotaExceeded naming the quota.
func (l *liveSet) reserve(ctx context.Context, add tenant.Usage) (*reservation, error) {
	p := tenant.FromContext(ctx)
	if p.Admin || l.quotas == nil {
		return nil, nil
	}
	q := l.quotas(p.Tenant)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := tenant.Check(p.Tenant, q, l.usageLocked(p.Tenant), add); err != nil {
		l.metrics.quotaRefused(p.Tenant, err)
		return nil, err
	}
	l.reserved[p.Tenant] = l.reserved[p.Tenant].Plus(add)
	return &reservation{tenant: p.Tenant, use: add}, nil
}

// consumeLocked moves part of r into a live entry the caller adds under
// the same hold of the lock.
func (l *liveSet) consumeLocked(r *reservation, part tenant.Usage) {
	if r == nil {
		return
	}
	part = tenant.Usage{Sandboxes: min(part.Sandboxes, r.use.Sandboxes), Builds: min(part.Builds, r.use.Builds),
		VCPU: min(part.VCPU, r.use.VCPU), MemoryMB: min(part.MemoryMB, r.use.MemoryMB)}
	r.use = r.use.Minus(part)
	l.reserved[r.tenant] = l.reserved[r.tenant].Minus(part)
}

// release gives back what r still holds.
func (l *liveSet) release(r *reservation) {
	if r == nil {
		return
	}
	l.mu.Lock()
	l.consumeLocked(r, r.use)
	l.mu.Unlock()
}

// usage is what tenant t's live sandboxes, starts in flight and builds
// hold.
func (l *liveSet) usage(t string) tenant.Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usageLocked(t)
}

func (l *liveSet) usageLocked(t string) tenant.Usage {
	use := l.reserved[t]
	for _, e := range l.entries {
		if e.owner == t {
			use = use.Plus(e.use)
		}
	}
	return use
}
