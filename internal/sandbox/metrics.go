package sandbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's Prometheus series.
type Metrics struct {
	createSeconds  *prometheus.HistogramVec
	poolMisses     *prometheus.CounterVec
	createFailures prometheus.Counter
	endings        *prometheus.CounterVec
}

// NewMetrics registers the service's series with reg; running and pools
// are read from the service at scrape time.
func NewMetrics(reg prometheus.Registerer, running func() int, pools func() map[string]int) *Metrics {
	m := &Metrics{
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "space_sandbox_create_seconds",
			Help:    "Time from a create request to a sandbox that can run commands, by source (pool or cold).",
			Buckets: []float64{.002, .005, .01, .025, .05, .075, .1, .15, .2, .3, .5, 1, 2, 5},
		}, []string{"source"}),
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_pool_misses_total",
			Help: "Creates that found the template's warm pool empty.",
		}, []string{"template"}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "space_sandbox_create_failures_total",
			Help: "Creates that failed and were rolled back.",
		}),
		endings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_sandbox_ended_total",
			Help: "Sandboxes that ended, by final state and reason.",
		}, []string{"state", "reason"}),
	}
	reg.MustRegister(m.createSeconds, m.createFailures, m.endings, m.poolMisses,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "space_sandboxes_running",
			Help: "Sandboxes running on this node.",
		}, func() float64 { return float64(running()) }),
		poolCollector{pools: pools, desc: prometheus.NewDesc("space_pool_ready",
			"Booted sandboxes waiting in a template's warm pool.", []string{"template"}, nil)})
	return m
}

func (m *Metrics) created(d time.Duration, pooled bool) {
	if m != nil {
		source := "cold"
		if pooled {
			source = "pool"
		}
		m.createSeconds.WithLabelValues(source).Observe(d.Seconds())
	}
}

func (m *Metrics) poolMiss(template string) {
	if m != nil {
		m.poolMisses.WithLabelValues(template).Inc()
	}
}

func (m *Metrics) createFailed() {
	if m != nil {
		m.createFailures.Inc()
	}
}

func (m *Metrics) ended(state, reason string) {
	if m != nil {
		if len(reason) > 40 {
			reason = "other"
		}
		m.endings.WithLabelValues(state, reason).Inc()
	}
}

// poolCollector reports each pool's ready count at scrape time.
type poolCollector struct {
	pools func() map[string]int
	desc  *prometheus.Desc
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for t, n := range c.pools() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), t)
	}
}
