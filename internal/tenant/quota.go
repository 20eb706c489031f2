package tenant

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Usage is what a tenant holds at once. Sizes are in MiB, rounded up.
type Usage struct {
	Sandboxes int `json:"sandboxes"`
	VCPU      int `json:"vcpu"`
	MemoryMB  int `json:"memory_mb"`
	// Builds: template builds queued or running (their vCPUs and memory
	// are in VCPU and MemoryMB).
	Builds int `json:"builds"`
	// PausedSandboxes and PausedMB: paused sandboxes and the size of
	// their checkpoints in the object store.
	PausedSandboxes int `json:"paused_sandboxes"`
	PausedMB        int `json:"paused_mb"`
	// Snapshots and SnapshotMB: disk and full snapshots in the object
	// store.
	Snapshots  int `json:"snapshots"`
	SnapshotMB int `json:"snapshot_mb"`
	// Templates and TemplateMB: templates, and the size of the builds
	// their tags point at.
	Templates  int `json:"templates"`
	TemplateMB int `json:"template_mb"`
}

// MiB is bytes in MiB, rounded up (what Usage counts sizes in).
func MiB(bytes int64) int {
	if bytes <= 0 {
		return 0
	}
	return int((bytes + 1<<20 - 1) >> 20)
}

// quota is one bound of store.Quotas and the part of Usage it bounds.
type quota struct {
	name  string
	limit func(*store.Quotas) *int
	use   func(*Usage) *int
}

// quotas are every quota on what a tenant holds, in the order a refusal
// looks at them.
var quotas = []quota{
	{"sandboxes", func(q *store.Quotas) *int { return &q.Sandboxes }, func(u *Usage) *int { return &u.Sandboxes }},
	{"builds", func(q *store.Quotas) *int { return &q.Builds }, func(u *Usage) *int { return &u.Builds }},
	{"vcpu", func(q *store.Quotas) *int { return &q.VCPU }, func(u *Usage) *int { return &u.VCPU }},
	{"memory_mb", func(q *store.Quotas) *int { return &q.MemoryMB }, func(u *Usage) *int { return &u.MemoryMB }},
	{"paused_sandboxes", func(q *store.Quotas) *int { return &q.PausedSandboxes }, func(u *Usage) *int { return &u.PausedSandboxes }},
	{"paused_mb", func(q *store.Quotas) *int { return &q.PausedMB }, func(u *Usage) *int { return &u.PausedMB }},
	{"snapshots", func(q *store.Quotas) *int { return &q.Snapshots }, func(u *Usage) *int { return &u.Snapshots }},
	{"snapshot_mb", func(q *store.Quotas) *int { return &q.SnapshotMB }, func(u *Usage) *int { return &u.SnapshotMB }},
	{"templates", func(q *store.Quotas) *int { return &q.Templates }, func(u *Usage) *int { return &u.Templates }},
	{"template_mb", func(q *store.Quotas) *int { return &q.TemplateMB }, func(u *Usage) *int { return &u.TemplateMB }},
}

// Plus returns u + v.
func (u Usage) Plus(v Usage) Usage {
	for _, q := range quotas {
		*q.use(&u) += *q.use(&v)
	}
	return u
}

// Minus returns u - v.
func (u Usage) Minus(v Usage) Usage {
	for _, q := range quotas {
		*q.use(&u) -= *q.use(&v)
	}
	return u
}

func withDefaults(q, d store.Quotas) store.Quotas {
	for _, f := range quotas {
		if *f.limit(&q) == 0 {
			*f.limit(&q) = *f.limit(&d)
		}
	}
	if q.CreatesBurst == 0 {
		q.CreatesBurst = d.CreatesBurst
	}
	if q.CreatesPerSecond == 0 {
		q.CreatesPerSecond = d.CreatesPerSecond
	}
	return q
}

// Check returns ErrQuotaExceeded, naming the quota, its value and the
// tenant's use, when adding add to use would cross one of q's quotas.
// Only the quotas add adds to are looked at.
func Check(tenant string, q store.Quotas, use, add Usage) error {
	after := use.Plus(add)
	for _, f := range quotas {
		limit, now, more := *f.limit(&q), *f.use(&use), *f.use(&add)
		if limit <= 0 || more <= 0 {
			continue
		}
		if next := *f.use(&after); next > limit {
			return errdefs.WithDetails(errdefs.ErrQuotaExceeded,
				map[string]any{"quota": f.name, "limit": limit, "used": now, "requested": more},
				"tenant %s is at its %s quota: %d in use, limit %d, this request needs %d more", tenant, f.name, now, limit, more)
		}
	}
	return nil
}

// checkQuotas refuses a quota other than 0 (the node's default), -1 (no
// limit) or a positive one: Check reads every value below 1 as no limit,
// so a mistyped -2 would lift a limit silently.
func checkQuotas(q store.Quotas) error {
	check := func(name string, v int) error {
		if v < -1 {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s is %d: use a positive number, 0 for the node's default, or -1 for no limit", name, v)
		}
		return nil
	}
	for _, f := range quotas {
		if err := check(f.name, *f.limit(&q)); err != nil {
			return err
		}
	}
	if err := check("creates_burst", q.CreatesBurst); err != nil {
		return err
	}
	if q.CreatesPerSecond < 0 && q.CreatesPerSecond != -1 {
		return errdefs.New(errdefs.ErrInvalidArgument, "creates_per_second must be positive, or -1 for no limit")
	}
	return nil
}

// SetSandboxUsage says where what a tenant's sandboxes, paused sandboxes
// and snapshots hold is read (the sandbox service's Usage, which is made
// after this service). Call it before serving.
func (s *Service) SetSandboxUsage(fn func(ctx context.Context, tenant string) (Usage, error)) {
	s.sandboxUsage = fn
}

// SetTemplateBytes says where the bytes a tenant's templates hold are
// read (the template service's TenantBytes, which counts a layer shared by
// several builds once). Unset, each build's own bytes are summed.
func (s *Service) SetTemplateBytes(fn func(ctx context.Context, tenant string) (int64, error)) {
	s.templateBytes = fn
}

// Usage is what tenant t holds now: its sandboxes, paused sandboxes and
// snapshots (the sandbox service's count) and its templates.
func (s *Service) Usage(ctx context.Context, t string) (Usage, error) {
	var u Usage
	if s.sandboxUsage != nil {
		var err error
		if u, err = s.sandboxUsage(ctx, t); err != nil {
			return u, err
		}
	}
	tu, _, err := s.templateUsage(ctx, t, "")
	if err != nil {
		return u, err
	}
	return u.Plus(tu), nil
}

// templateUsage is what tenant t's templates hold, and whether t has a
// template named name.
func (s *Service) templateUsage(ctx context.Context, t, name string) (Usage, bool, error) {
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return Usage{}, false, fmt.Errorf("count templates: %w", err)
	}
	var u Usage
	var has bool
	var bytes int64
	builds := map[string]bool{}
	for _, tpl := range all {
		if Of(tpl.Tenant) != t {
			continue
		}
		u.Templates++
		has = has || tpl.Name == name
		for _, tag := range tpl.Tags {
			if builds[tag.Build] {
				continue
			}
			builds[tag.Build] = true
			b, err := s.store.GetBuild(ctx, tag.Build)
			if errdefs.Class(err) == errdefs.ErrNotFound {
				continue
			}
			if err != nil {
				return Usage{}, false, fmt.Errorf("count templates: %w", err)
			}
			if b.Result != nil {
				bytes += b.Result.Bytes
			}
		}
	}
	if s.templateBytes != nil {
		if bytes, err = s.templateBytes(ctx, t); err != nil {
			return Usage{}, false, fmt.Errorf("count templates' bytes: %w", err)
		}
	}
	u.TemplateMB = MiB(bytes)
	return u, has, nil
}

// AdmitTemplate runs create, a build that makes template name or adds a
// build to it, if the caller's tenant may: a new name counts against its
// templates quota, and any build against its template_mb quota (a build's
// size is known only once it is done, so a tenant already at the quota is
// refused). A tenant's checks and creates take turns, so creates at once
// cannot all pass one count. An empty name (not a valid one) is left to
// create to refuse.
func (s *Service) AdmitTemplate(ctx context.Context, name string, create func() error) error {
	p := FromContext(ctx)
	q := s.Quotas(p.Tenant)
	if p.Admin || name == "" || (q.Templates <= 0 && q.TemplateMB <= 0) {
		return create()
	}
	mu, _ := s.templateLocks.LoadOrStore(p.Tenant, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	use, has, err := s.templateUsage(ctx, p.Tenant, name)
	if err != nil {
		return err
	}
	add := Usage{TemplateMB: 1}
	if !has {
		add.Templates = 1
	}
	if err := Check(p.Tenant, q, use, add); err != nil {
		return err
	}
	return create()
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

// AllowCreate takes n creates (or resumes or forks) from p's tenant's
// bucket, or answers ErrResourceExhausted (429) saying what is left of the
// burst and when to retry (a Retryable error: the Retry-After header). The
// admin key is not limited.
func (s *Service) AllowCreate(p Principal, n int) error {
	return s.allowCreate(p, n, time.Now())
}

func (s *Service) allowCreate(p Principal, n int, now time.Time) error {
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
	if n <= burst && l.AllowN(now, n) {
		return nil
	}
	s.rateLimited.WithLabelValues(p.Tenant).Inc()
	// What is left of the burst now (a refused AllowN takes nothing), in
	// hundredths rounded down so it never promises a create that fails.
	left := math.Floor(max(l.TokensAt(now), 0)*100) / 100
	used := math.Round((float64(burst)-left)*100) / 100
	details := map[string]any{"quota": "creates_per_second", "limit": q.CreatesPerSecond, "burst": burst,
		"used": used, "tokens_left": left, "requested": n}
	if n > burst {
		return errdefs.WithDetails(errdefs.ErrResourceExhausted, details,
			"tenant %s is limited to bursts of %d creates (at %g per second): a request for %d at once can never pass; ask for %d or fewer",
			p.Tenant, burst, q.CreatesPerSecond, n, burst)
	}
	// The time until the bucket holds n again, rounded up to the
	// millisecond, so a retry after it passes.
	wait := time.Duration(math.Ceil((float64(n)-l.TokensAt(now))/q.CreatesPerSecond*1000)) * time.Millisecond
	wait = max(wait, time.Millisecond)
	details["retry_after_ms"] = wait.Milliseconds()
	return errdefs.Retryable(errdefs.WithDetails(errdefs.ErrResourceExhausted, details,
		"tenant %s is over its rate of %g creates per second (burst %d): %g of %d creates left, this request needs %d; retry in %s",
		p.Tenant, q.CreatesPerSecond, burst, left, burst, n, wait), wait)
}
