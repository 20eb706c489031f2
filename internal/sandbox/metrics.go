package sandbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's Prometheus series.
type Metrics struct {
	createSeconds  prometheus.Histogram
	createFailures prometheus.Counter
	endings        *prometheus.CounterVec
}

// NewMetrics registers the service's series with reg; running is read from
// the service at scrape time.
func NewMetrics(reg prometheus.Registerer, running func() int) *Metrics {
	m := &Metrics{
		createSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "space_sandbox_create_seconds",
			Help:    "Time from a create request to a sandbox that can run commands.",
			Buckets: []float64{.01, .025, .05, .075, .1, .15, .2, .3, .5, 1, 2, 5},
		}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "space_sandbox_create_failures_total",
			Help: "Creates that failed and were rolled back.",
		}),
		endings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_sandbox_ended_total",
			Help: "Sandboxes that ended, by final state and reason.",
		}, []string{"state", "reason"}),
	}
	reg.MustRegister(m.createSeconds, m.createFailures, m.endings,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "space_sandboxes_running",
			Help: "Sandboxes running on this node.",
		}, func() float64 { return float64(running()) }))
	return m
}

func (m *Metrics) created(d time.Duration) {
	if m != nil {
		m.createSeconds.Observe(d.Seconds())
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
