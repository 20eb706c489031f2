package webhook

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	queued, delivered, failures prometheus.Counter
	pending                     prometheus.Gauge
	dropped                     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queued:    prometheus.NewCounter(prometheus.CounterOpts{Name: "space_webhook_deliveries_queued_total", Help: "Webhook deliveries queued (one per event and webhook)."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "space_webhook_deliveries_total", Help: "Webhook deliveries a receiver accepted (2xx)."}),
		failures:  prometheus.NewCounter(prometheus.CounterOpts{Name: "space_webhook_delivery_failures_total", Help: "Failed webhook delivery attempts (each is retried unless dropped)."}),
		pending:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "space_webhook_deliveries_pending", Help: "Webhook deliveries waiting, all tenants."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "space_webhook_events_dropped_total",
			Help: "Webhook deliveries given up, by reason: queue_full (the tenant's queue was at its bound), refused (a floor or node address), expired (retried past the age limit), store (the catalog failed), missed (changes came too fast to follow)."},
			[]string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.queued, m.delivered, m.failures, m.pending, m.dropped)
	}
	return m
}
