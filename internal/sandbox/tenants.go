package sandbox

import (
	"context"

	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Every sandbox belongs to the tenant whose key created it (a fork to its
// parent's, a resume keeps it). Creates, resumes and forks reserve their
// share of the tenant's quotas before any work, under s.mu, so a burst
// cannot pass the check together; the reservation turns into the live
// entry under the same lock, so nothing is counted twice.

// reservation is the part of a tenant's quotas that creates in flight
// hold. nil: nothing was reserved (the admin, or no quotas).
type reservation struct {
	tenant string
	use    tenant.Usage
}

// usageOf is one running sandbox of rec's limits.
func usageOf(cpu, memoryMB int) tenant.Usage {
	return tenant.Usage{Sandboxes: 1, VCPU: cpu, MemoryMB: memoryMB}
}

// reserve takes add from the quotas of ctx's tenant, or answers
// ErrQuotaExceeded naming the quota.
func (s *Service) reserve(ctx context.Context, add tenant.Usage) (*reservation, error) {
	p := tenant.FromContext(ctx)
	if p.Admin || s.cfg.Quotas == nil {
		return nil, nil
	}
	q := s.cfg.Quotas(p.Tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := tenant.Check(p.Tenant, q, s.usageLocked(p.Tenant), add); err != nil {
		s.metrics.quotaRefused(p.Tenant, err)
		return nil, err
	}
	s.reserved[p.Tenant] = s.reserved[p.Tenant].Plus(add)
	return &reservation{tenant: p.Tenant, use: add}, nil
}

// consumeLocked moves part of r into a live entry the caller adds under
// the same hold of s.mu.
func (s *Service) consumeLocked(r *reservation, part tenant.Usage) {
	if r == nil {
		return
	}
	part = tenant.Usage{Sandboxes: min(part.Sandboxes, r.use.Sandboxes), VCPU: min(part.VCPU, r.use.VCPU), MemoryMB: min(part.MemoryMB, r.use.MemoryMB)}
	r.use = r.use.Minus(part)
	s.reserved[r.tenant] = s.reserved[r.tenant].Minus(part)
}

// release gives back what r still holds.
func (s *Service) release(r *reservation) {
	if r == nil {
		return
	}
	s.mu.Lock()
	s.consumeLocked(r, r.use)
	s.mu.Unlock()
}

// usageLocked is what tenant t's live sandboxes and creates in flight hold.
func (s *Service) usageLocked(t string) tenant.Usage {
	use := s.reserved[t]
	for _, e := range s.live {
		if e.owner == t {
			use = use.Plus(e.use)
		}
	}
	return use
}

// Usage is what tenant t holds now: its running sandboxes (and creates in
// flight) and its paused ones.
func (s *Service) Usage(ctx context.Context, t string) (tenant.Usage, error) {
	s.mu.Lock()
	use := s.usageLocked(t)
	s.mu.Unlock()
	paused, err := s.pausedOf(ctx, t)
	use.PausedSandboxes = paused
	return use, err
}

func (s *Service) pausedOf(ctx context.Context, t string) (int, error) {
	recs, err := s.store.ListSandboxes(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		if r.State == store.StatePaused && tenant.Of(r.Tenant) == t {
			n++
		}
	}
	return n, nil
}

// reservePause takes one paused sandbox from the quota of ctx's tenant,
// or refuses a tenant already at it. Pauses in flight count, so pauses at
// once cannot all pass one count; the caller releases when its pause is
// recorded (or failed).
func (s *Service) reservePause(ctx context.Context) (release func(), err error) {
	p := tenant.FromContext(ctx)
	if p.Admin || s.cfg.Quotas == nil {
		return func() {}, nil
	}
	q := s.cfg.Quotas(p.Tenant)
	if q.PausedSandboxes <= 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.pausedOf(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	if err := tenant.Check(p.Tenant, q, tenant.Usage{PausedSandboxes: n + s.pausing[p.Tenant]}, tenant.Usage{PausedSandboxes: 1}); err != nil {
		s.metrics.quotaRefused(p.Tenant, err)
		return nil, err
	}
	s.pausing[p.Tenant]++
	return func() {
		s.mu.Lock()
		s.pausing[p.Tenant]--
		s.mu.Unlock()
	}, nil
}

// Owner returns the tenant of sandbox id, live, paused or ended, and
// whether it is known here (pooled and build sandboxes are nobody's).
func (s *Service) Owner(ctx context.Context, id string) (string, bool) {
	if e, ok := s.entry(id); ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		return tenant.Of(e.rec.Tenant), e.rec.State != store.StatePooled
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil || rec.State == store.StatePooled || rec.State == store.StateCreating || rec.Build != "" {
		return "", false
	}
	return tenant.Of(rec.Tenant), true
}

// useOrZero is what r holds (nothing for nil).
func (r *reservation) useOrZero() tenant.Usage {
	if r == nil {
		return tenant.Usage{}
	}
	return r.use
}

// qualifyNames turns the customer key and secret names of a create into
// the names spaced keeps for its tenant (a tenant names only its own).
func qualifyNames(ctx context.Context, req *CreateRequest) error {
	t := tenant.FromContext(ctx).Tenant
	var err error
	if req.KeyID != "" {
		if req.KeyID, err = tenant.Qualify(t, req.KeyID); err != nil {
			return err
		}
	}
	if len(req.Secrets) > 0 {
		scoped := make(map[string]string, len(req.Secrets))
		for env, name := range req.Secrets {
			if scoped[env], err = tenant.Qualify(t, name); err != nil {
				return err
			}
		}
		req.Secrets = scoped
	}
	return nil
}
