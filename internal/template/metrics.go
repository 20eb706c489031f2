package template

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the template service's Prometheus series.
type Metrics struct {
	builds    *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	steps     *prometheus.CounterVec
	collected *prometheus.CounterVec
}

// NewMetrics registers the service's counters and histograms with reg;
// the builds in progress, read at scrape time, are its Collector,
// registered once the service exists.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_template_builds_total",
			Help: "Template builds that ended, by final state (ready, error, canceled).",
		}, []string{"state"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "space_template_build_seconds",
			Help:    "Time from a build's request to its end, by final state.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"state"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_template_build_steps_total",
			Help: "RUN and COPY steps of ended builds, by whether their layer came from the cache.",
		}, []string{"cached"}),
		collected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_template_collected_total",
			Help: "What the template collector removed, by kind (image, layer, start, files).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.builds, m.seconds, m.steps, m.collected)
	return m
}

// NewCollector reports the builds of svc queued or running
// (space_template_builds_active) at scrape time.
func NewCollector(svc *Service) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "space_template_builds_active",
		Help: "Template builds queued or running.",
	}, func() float64 { return float64(svc.Active()) })
}

// ended records a build's end; nil-safe.
func (m *Metrics) ended(state string, seconds float64, layered, cached int) {
	if m == nil {
		return
	}
	m.builds.WithLabelValues(state).Inc()
	m.seconds.WithLabelValues(state).Observe(seconds)
	m.steps.WithLabelValues("true").Add(float64(cached))
	m.steps.WithLabelValues("false").Add(float64(max(layered-cached, 0)))
}

// collectedOf records a collection; nil-safe.
func (m *Metrics) collectedOf(c Collected) {
	if m == nil {
		return
	}
	for kind, n := range map[string]int{"image": c.Images, "layer": c.Layers, "start": c.Starts, "files": c.Files} {
		m.collected.WithLabelValues(kind).Add(float64(n))
	}
}
