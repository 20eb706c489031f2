package sandbox

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Metrics are the service's Prometheus series.
type Metrics struct {
	createSeconds  *prometheus.HistogramVec
	poolMisses     *prometheus.CounterVec
	poolReleases   *prometheus.CounterVec
	createFailures prometheus.Counter
	endings        *prometheus.CounterVec
	// Checkpoints (op: pause, snapshot) and restores (op: resume, fork,
	// snapshot).
	imageSeconds   *prometheus.HistogramVec
	imageBytes     *prometheus.CounterVec
	imageFailures  *prometheus.CounterVec
	restoreSeconds *prometheus.HistogramVec
	quotaRefusals  *prometheus.CounterVec
	execSeconds    *prometheus.HistogramVec
	// Idle sandboxes frozen at rest, and the thaws that woke them.
	freezes     prometheus.Counter
	thawSeconds prometheus.Histogram
	// Idle sandboxes hibernated to disk, how long that took, and the
	// wakes that restored them.
	hibernateSeconds prometheus.Histogram
	hibernateBytes   prometheus.Counter
	hibernateFails   *prometheus.CounterVec
	reviveSeconds    prometheus.Histogram
}

// NewMetrics registers the service's counters and histograms with reg;
// the gauges read from the service at scrape time are its Collector,
// registered once the service exists.
func NewMetrics(reg prometheus.Registerer) *Metrics {
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
		poolReleases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_pool_released_total",
			Help: "Idle pool sandboxes torn down to make room for a create, resume or fork on a node at a budget.",
		}, []string{"template"}),
		createFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "space_sandbox_create_failures_total",
			Help: "Creates that failed and were rolled back.",
		}),
		endings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_sandbox_ended_total",
			Help: "Sandboxes that ended, by final state and reason.",
		}, []string{"state", "reason"}),
		imageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "space_checkpoint_seconds",
			Help:    "Time to take a checkpoint or disk snapshot, by operation and phase (image: runsc; upload: encrypt and store).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"op", "phase"}),
		imageBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_checkpoint_bytes_total",
			Help: "Bytes stored in object storage by checkpoints and disk snapshots.",
		}, []string{"op"}),
		imageFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_checkpoint_failures_total",
			Help: "Pauses, snapshots and resumes that failed and were rolled back.",
		}, []string{"op"}),
		restoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "space_restore_seconds",
			Help:    "Time to resume a sandbox, by phase (download: fetch and decrypt; restore: runsc until the agent answers).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"phase"}),
		execSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "space_exec_seconds",
			Help:    "Time from a request to run a command (or open a terminal) through the native API to the agent's answer that it started, by kind (command, pty).",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"kind"}),
		freezes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "space_sandbox_idle_freezes_total",
			Help: "Idle running sandboxes frozen at rest (cgroup freezer).",
		}),
		thawSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "space_sandbox_thaw_seconds",
			Help:    "Time to thaw a sandbox frozen at rest before the request that woke it.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .5},
		}),
		hibernateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "space_sandbox_hibernate_seconds",
			Help:    "Time to hibernate an idle sandbox: checkpoint, encrypt and write its image to the node's disk, free its memory.",
			Buckets: []float64{.05, .1, .2, .5, 1, 2, 5, 10, 30},
		}),
		hibernateBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "space_sandbox_hibernate_bytes_total",
			Help: "Bytes of the images of hibernated sandboxes written to the node's disk.",
		}),
		hibernateFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_sandbox_hibernate_failures_total",
			Help: "Hibernations and wakes from hibernation that failed, by step (hibernate, wake); a failed hibernation leaves the sandbox running, a failed wake leaves it hibernated.",
		}, []string{"step"}),
		reviveSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "space_sandbox_hibernate_wake_seconds",
			Help:    "Time to restore a hibernated sandbox in place before the request that woke it.",
			Buckets: []float64{.05, .1, .15, .2, .3, .4, .5, 1, 2, 5},
		}),
	}
	m.quotaRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "space_tenant_quota_refusals_total",
		Help: "Creates, resumes, forks and pauses refused (403) because the tenant was at a quota.",
	}, []string{"tenant", "quota"})
	reg.MustRegister(m.quotaRefusals)
	reg.MustRegister(m.createSeconds, m.createFailures, m.endings, m.poolMisses, m.poolReleases,
		m.imageSeconds, m.imageBytes, m.imageFailures, m.restoreSeconds, m.execSeconds, m.freezes, m.thawSeconds,
		m.hibernateSeconds, m.hibernateBytes, m.hibernateFails, m.reviveSeconds)
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

func (m *Metrics) execStarted(d time.Duration, pty bool) {
	if m != nil {
		kind := "command"
		if pty {
			kind = "pty"
		}
		m.execSeconds.WithLabelValues(kind).Observe(d.Seconds())
	}
}

func (m *Metrics) poolMiss(template string) {
	if m != nil {
		m.poolMisses.WithLabelValues(template).Inc()
	}
}

func (m *Metrics) quotaRefused(tenant string, err error) {
	if m != nil {
		d, _ := errdefs.Details(err).(map[string]any)
		q, _ := d["quota"].(string)
		m.quotaRefusals.WithLabelValues(tenant, q).Inc()
	}
}

func (m *Metrics) poolReleased(template string) {
	if m != nil {
		m.poolReleases.WithLabelValues(template).Inc()
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

func (m *Metrics) checkpointed(op string, bytes int64, image, upload time.Duration) {
	if m != nil {
		m.imageSeconds.WithLabelValues(op, "image").Observe(image.Seconds())
		m.imageSeconds.WithLabelValues(op, "upload").Observe(upload.Seconds())
		m.imageBytes.WithLabelValues(op).Add(float64(bytes))
	}
}

func (m *Metrics) checkpointFailed(op string) {
	if m != nil {
		m.imageFailures.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) restored(download, restore time.Duration) {
	if m != nil {
		m.restoreSeconds.WithLabelValues("download").Observe(download.Seconds())
		m.restoreSeconds.WithLabelValues("restore").Observe(restore.Seconds())
	}
}

func (m *Metrics) froze() {
	if m != nil {
		m.freezes.Inc()
	}
}

func (m *Metrics) thawed(d time.Duration) {
	if m != nil {
		m.thawSeconds.Observe(d.Seconds())
	}
}

func (m *Metrics) hibernated(d time.Duration, bytes int64) {
	if m != nil {
		m.hibernateSeconds.Observe(d.Seconds())
		m.hibernateBytes.Add(float64(bytes))
	}
}

func (m *Metrics) hibernateFailed(step string) {
	if m != nil {
		m.hibernateFails.WithLabelValues(step).Inc()
	}
}

func (m *Metrics) revived(d time.Duration) {
	if m != nil {
		m.reviveSeconds.Observe(d.Seconds())
	}
}
