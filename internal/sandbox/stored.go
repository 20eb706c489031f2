package sandbox

import (
	"context"
	"sync"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// storedQuotas reserves, for the pauses and snapshots in flight, what
// they will keep in the object store of their tenants' quotas on paused
// sandboxes and snapshots. A tenant's count (what it keeps already, from
// the catalog and the repository) and its reservation are serialised per
// tenant, so stores at once cannot all pass one count.
type storedQuotas struct {
	// quotas returns a tenant's quotas (Config.Quotas; nil: none).
	quotas func(tenant string) store.Quotas
	// count is what a tenant keeps in the object store now
	// (Service.storedOf).
	count func(ctx context.Context, tenant string) (tenant.Usage, error)
	// adm measures what a sandbox uses now, for the estimate of its
	// image (nil: nothing measured).
	adm     *admission.Controller
	metrics *Metrics

	// locks serialise each tenant's count and reservation.
	locks keylock.Map
	mu    sync.Mutex
	// storing is what each tenant's stores in flight will keep.
	storing map[string]tenant.Usage
}

func newStoredQuotas(quotas func(string) store.Quotas, count func(context.Context, string) (tenant.Usage, error), adm *admission.Controller, m *Metrics) *storedQuotas {
	return &storedQuotas{quotas: quotas, count: count, adm: adm, metrics: m, storing: map[string]tenant.Usage{}}
}

// reserve takes add, what a pause or a snapshot of sandbox id will keep
// in the object store (one, and its size as estimate has it), from the
// quotas of ctx's tenant, or refuses a tenant that would cross one. Stores
// in flight count, so stores at once cannot all pass one count; the
// caller releases as soon as its artifact is recorded (or failed). A
// release waits for a count in progress, so a store is never missed
// between the record and the reservation (it may be counted twice for a
// moment: a refusal errs on the safe side).
func (sq *storedQuotas) reserve(ctx context.Context, add tenant.Usage) (release func(), err error) {
	p := tenant.FromContext(ctx)
	if p.Admin || sq.quotas == nil {
		return func() {}, nil
	}
	q := sq.quotas(p.Tenant)
	if q.PausedSandboxes <= 0 && q.PausedMB <= 0 && q.Snapshots <= 0 && q.SnapshotMB <= 0 {
		return func() {}, nil // nothing to count against
	}
	unlock := sq.locks.Lock(p.Tenant)
	defer unlock()
	use, err := sq.count(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	sq.mu.Lock()
	use = use.Plus(sq.storing[p.Tenant])
	sq.mu.Unlock()
	if err := tenant.Check(p.Tenant, q, use, add); err != nil {
		sq.metrics.quotaRefused(p.Tenant, err)
		return nil, err
	}
	sq.mu.Lock()
	sq.storing[p.Tenant] = sq.storing[p.Tenant].Plus(add)
	sq.mu.Unlock()
	return func() {
		unlock := sq.locks.Lock(p.Tenant)
		defer unlock()
		sq.mu.Lock()
		sq.storing[p.Tenant] = sq.storing[p.Tenant].Minus(add)
		sq.mu.Unlock()
	}, nil
}

// estimate is what a checkpoint (memory too) or a disk image of sandbox
// id will take, by what it uses now, in MiB (at least 1).
func (sq *storedQuotas) estimate(id string, memory bool) int {
	u := sq.adm.Usage(id)
	bytes := u.Disk
	if memory {
		bytes += u.Memory
	}
	return max(tenant.MiB(bytes), 1)
}
