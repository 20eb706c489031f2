package sandbox

import (
	"context"

	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Every sandbox belongs to the tenant whose key created it (a fork to its
// parent's, a resume keeps it). Creates, resumes and forks reserve their
// share of the tenant's quotas before any work, in the live set (live.go),
// under its lock, so a burst cannot pass the check together; the
// reservation turns into the live entry under the same lock, so nothing is
// counted twice.

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

// ReserveBuild takes one build, of cpu vCPUs and memoryMB MiB, from the
// quotas of ctx's tenant (builds, vcpu, memory_mb), or answers
// ErrQuotaExceeded naming the quota. The build holds it from its
// submission to its end, queued or running, whichever of its step
// sandboxes runs: held beside the tenant's sandboxes under the same lock,
// so builds and creates at once cannot all pass one count, and a build
// never fails half-way on its tenant's quota. release gives it back.
func (s *Service) ReserveBuild(ctx context.Context, cpu, memoryMB int) (release func(), err error) {
	r, err := s.live.reserve(ctx, tenant.Usage{Builds: 1, VCPU: cpu, MemoryMB: memoryMB})
	if err != nil {
		return nil, err
	}
	return func() { s.live.release(r) }, nil
}

// Usage is what tenant t holds now: its running sandboxes (and creates in
// flight), its paused ones and its snapshots.
func (s *Service) Usage(ctx context.Context, t string) (tenant.Usage, error) {
	use := s.live.usage(t)
	stored, err := s.storedOf(ctx, t)
	return use.Plus(stored), err
}

// storedOf is what tenant t keeps in the object store: its paused
// sandboxes' checkpoints and its snapshots.
func (s *Service) storedOf(ctx context.Context, t string) (tenant.Usage, error) {
	tenants := []string{t}
	if t == tenant.Default {
		tenants = append(tenants, "") // made before tenants existed
	}
	var u tenant.Usage
	var snapshots int64
	n, paused, err := s.store.PausedUsage(ctx, tenants)
	if err != nil {
		return tenant.Usage{}, err
	}
	u.PausedSandboxes = n
	sns, err := s.snaps.Snapshots(tenant.NewContext(ctx, tenant.Admin), SnapshotFilter{Tenant: t})
	if err != nil {
		return tenant.Usage{}, err
	}
	for _, sn := range sns {
		u.Snapshots++
		snapshots += sn.Bytes
	}
	u.PausedMB, u.SnapshotMB = tenant.MiB(paused), tenant.MiB(snapshots)
	return u, nil
}

// Owner returns the tenant of sandbox id, live, paused or ended, and
// whether it is known here (pooled and build sandboxes are nobody's).
func (s *Service) Owner(ctx context.Context, id string) (string, bool) {
	if e, ok := s.live.entry(id); ok {
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
