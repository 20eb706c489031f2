package tenant

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Usage is what a tenant holds at once.
type Usage struct {
	Sandboxes       int `json:"sandboxes"`
	VCPU            int `json:"vcpu"`
	MemoryMB        int `json:"memory_mb"`
	PausedSandboxes int `json:"paused_sandboxes"`
}

// Plus returns u + v.
func (u Usage) Plus(v Usage) Usage {
	return Usage{Sandboxes: u.Sandboxes + v.Sandboxes, VCPU: u.VCPU + v.VCPU, MemoryMB: u.MemoryMB + v.MemoryMB,
		PausedSandboxes: u.PausedSandboxes + v.PausedSandboxes}
}

// Minus returns u - v.
func (u Usage) Minus(v Usage) Usage {
	return Usage{Sandboxes: u.Sandboxes - v.Sandboxes, VCPU: u.VCPU - v.VCPU, MemoryMB: u.MemoryMB - v.MemoryMB,
		PausedSandboxes: u.PausedSandboxes - v.PausedSandboxes}
}

func withDefaults(q, d store.Quotas) store.Quotas {
	pick := func(v, def int) int {
		if v == 0 {
			return def
		}
		return v
	}
	q.Sandboxes = pick(q.Sandboxes, d.Sandboxes)
	q.VCPU = pick(q.VCPU, d.VCPU)
	q.MemoryMB = pick(q.MemoryMB, d.MemoryMB)
	q.PausedSandboxes = pick(q.PausedSandboxes, d.PausedSandboxes)
	q.CreatesBurst = pick(q.CreatesBurst, d.CreatesBurst)
	if q.CreatesPerSecond == 0 {
		q.CreatesPerSecond = d.CreatesPerSecond
	}
	return q
}

// Check returns ErrQuotaExceeded, naming the quota, its value and the
// tenant's use, when adding add to use would cross one of q's quotas.
func Check(tenant string, q store.Quotas, use, add Usage) error {
	after := use.Plus(add)
	for _, c := range []struct {
		name       string
		limit, now int
		adds       bool
	}{
		{"sandboxes", q.Sandboxes, use.Sandboxes, add.Sandboxes > 0},
		{"vcpu", q.VCPU, use.VCPU, add.VCPU > 0},
		{"memory_mb", q.MemoryMB, use.MemoryMB, add.MemoryMB > 0},
		{"paused_sandboxes", q.PausedSandboxes, use.PausedSandboxes, add.PausedSandboxes > 0},
	} {
		if c.limit <= 0 || !c.adds {
			continue
		}
		if next := after.get(c.name); next > c.limit {
			return errdefs.WithDetails(errdefs.ErrQuotaExceeded,
				map[string]any{"quota": c.name, "limit": c.limit, "used": c.now, "requested": next - c.now},
				"tenant %s is at its %s quota: %d in use, limit %d, this request needs %d more", tenant, c.name, c.now, c.limit, next-c.now)
		}
	}
	return nil
}

func (u Usage) get(name string) int {
	switch name {
	case "sandboxes":
		return u.Sandboxes
	case "vcpu":
		return u.VCPU
	case "memory_mb":
		return u.MemoryMB
	case "paused_sandboxes":
		return u.PausedSandboxes
	}
	panic(fmt.Sprintf("unknown quota %q", name))
}

// rates are the per-tenant token buckets of creates.
type rates struct {
	mu sync.Mutex
	by map[string]*rate.Limiter
}

func newRates() *rates { return &rates{by: map[string]*rate.Limiter{}} }

func (r *rates) forget(tenant string) {
	r.mu.Lock()
	delete(r.by, tenant)
	r.mu.Unlock()
}

// AllowCreate takes one create (or resume or fork) from p's tenant's
// bucket, or answers ErrResourceExhausted (429) saying when to retry. The
// admin key is not limited.
func (s *Service) AllowCreate(p Principal, n int) error {
	if p.Admin {
		return nil
	}
	q := s.Quotas(p.Tenant)
	if q.CreatesPerSecond <= 0 {
		return nil
	}
	burst := max(q.CreatesBurst, 1)
	s.rate.mu.Lock()
	l := s.rate.by[p.Tenant]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(q.CreatesPerSecond), burst)
		s.rate.by[p.Tenant] = l
	}
	s.rate.mu.Unlock()
	now := time.Now()
	if n > burst || !l.AllowN(now, n) {
		s.rateLimited.WithLabelValues(p.Tenant).Inc()
		wait := time.Duration(float64(n) / q.CreatesPerSecond * float64(time.Second))
		return errdefs.WithDetails(errdefs.ErrResourceExhausted,
			map[string]any{"quota": "creates_per_second", "limit": q.CreatesPerSecond, "burst": burst, "retry_after_ms": wait.Milliseconds()},
			"tenant %s is over its rate of %g creates per second (burst %d); retry in %s", p.Tenant, q.CreatesPerSecond, burst, wait.Round(time.Millisecond))
	}
	return nil
}
