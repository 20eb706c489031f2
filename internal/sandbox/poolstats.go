package sandbox

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/errdefs"
)

// PoolStat is one warm pool as it is now.
type PoolStat struct {
	Template string
	// Ready sandboxes wait to be claimed; Booting are being made.
	Ready, Booting int
	// Target is what the pool refills to: it rises on misses (demand) and
	// falls a step per quiet minute, within [Min, Max].
	Target, Min, Max int
	// Held is why admission control holds the refills back now, "" when
	// it does not.
	Held string
}

// PoolStats returns every warm pool, by template.
func (ps *Pools) PoolStats() []PoolStat {
	out := make([]PoolStat, 0, len(ps.byTemplate))
	for t, p := range ps.byTemplate {
		p.mu.Lock()
		out = append(out, PoolStat{Template: t, Ready: len(p.ready), Booting: p.booting, Target: p.target, Min: p.cfg.Min, Max: p.cfg.Max, Held: p.held})
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

// NewCollector reports, at scrape time, the gauges of svc: the sandboxes
// running (space_sandboxes_running), those of them resting frozen and
// hibernated (space_sandboxes_resting), and each warm pool's sandboxes ready
// (space_pool_ready) and booting (space_pool_booting), and the size it
// refills to (space_pool_target, which follows demand). Register it once
// svc exists: nothing reads a service not yet made.
func NewCollector(svc *Service) prometheus.Collector {
	return collector{
		svc:     svc,
		running: prometheus.NewDesc("space_sandboxes_running", "Sandboxes running on this node.", nil, nil),
		resting: prometheus.NewDesc("space_sandboxes_resting", "Running sandboxes resting in a tier: frozen (the cgroup freezer) or hibernated (checkpointed to this node's disk).", []string{"tier"}, nil),
		ready:   prometheus.NewDesc("space_pool_ready", "Booted sandboxes waiting in a template's warm pool.", []string{"template"}, nil),
		booting: prometheus.NewDesc("space_pool_booting", "Sandboxes booting to refill a template's warm pool.", []string{"template"}, nil),
		target:  prometheus.NewDesc("space_pool_target", "The size a template's warm pool refills to (rises on misses, falls a step per quiet minute).", []string{"template"}, nil),
	}
}

type collector struct {
	svc                                      *Service
	running, resting, ready, booting, target *prometheus.Desc
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.resting
	ch <- c.ready
	ch <- c.booting
	ch <- c.target
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(c.svc.Running()))
	frozen, hibernated := c.svc.restingNow()
	ch <- prometheus.MustNewConstMetric(c.resting, prometheus.GaugeValue, float64(frozen), RestFrozen)
	ch <- prometheus.MustNewConstMetric(c.resting, prometheus.GaugeValue, float64(hibernated), RestHibernated)
	for _, p := range c.svc.Pools().PoolStats() {
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(p.Ready), p.Template)
		ch <- prometheus.MustNewConstMetric(c.booting, prometheus.GaugeValue, float64(p.Booting), p.Template)
		ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(p.Target), p.Template)
	}
}

// SetPool sizes the warm pool of template until the daemon restarts (its
// configuration decides again then): the target is kept within the new
// [min, max], ready sandboxes beyond max are torn down, and a pool below
// its new target refills now. Only pools the configuration made exist.
func (ps *Pools) SetPool(template string, min, max int) (PoolStat, error) {
	if min < 0 || min > max || max > maxPoolSize {
		return PoolStat{}, errdefs.New(errdefs.ErrInvalidArgument, "pool sizes must be integers with 0 <= min <= max <= %d", maxPoolSize)
	}
	p := ps.byTemplate[template]
	if p == nil {
		return PoolStat{}, errdefs.New(errdefs.ErrNotFound, "template %q has no warm pool on this node (SPACE_POOL configures them)", template)
	}
	p.resize(min, max)
	for _, st := range ps.PoolStats() {
		if st.Template == template {
			return st, nil
		}
	}
	return PoolStat{}, errdefs.New(errdefs.ErrNotFound, "template %q has no warm pool on this node", template)
}

// maxPoolSize bounds a pool as the configuration does.
const maxPoolSize = 1000

// resize sets the pool's bounds and moves its target into them.
func (p *pool) resize(min, max int) {
	p.mu.Lock()
	p.cfg.Min, p.cfg.Max = min, max
	p.target = clampInt(p.target, min, max)
	var gone []*booted
	if extra := len(p.ready) - max; extra > 0 {
		gone = append(gone, p.ready[:extra]...)
		p.ready = p.ready[extra:]
	}
	p.retryAt = time.Time{}
	p.mu.Unlock()
	for _, b := range gone {
		p.svc.background.Go(b.undo) // Close waits for it
	}
	p.kick()
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }
