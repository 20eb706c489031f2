package tenant

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector reports each tenant's usage at scrape time, and the creates
// its rate refused.
type Collector struct {
	svc   *Service
	usage func(ctx context.Context, tenant string) (Usage, error)

	sandboxes, vcpu, memory, paused *prometheus.Desc
}

// NewCollector returns the tenants' series; usage reads what a tenant
// holds (the sandbox service's Usage).
func NewCollector(svc *Service, usage func(ctx context.Context, tenant string) (Usage, error)) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"tenant"}, nil)
	}
	return &Collector{svc: svc, usage: usage,
		sandboxes: d("space_tenant_sandboxes", "Running sandboxes of a tenant (creates in flight included)."),
		vcpu:      d("space_tenant_vcpu", "Sum of the cpu limits of a tenant's running sandboxes."),
		memory:    d("space_tenant_memory_mb", "Sum of the memory limits of a tenant's running sandboxes."),
		paused:    d("space_tenant_paused_sandboxes", "Paused sandboxes of a tenant."),
	}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sandboxes, c.vcpu, c.memory, c.paused} {
		ch <- d
	}
	c.svc.rateLimited.Describe(ch)
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.svc.Tenants() {
		u, err := c.usage(context.Background(), t.ID)
		if err != nil {
			slog.Warn("tenant usage for metrics", "tenant", t.ID, "err", err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(u.Sandboxes), t.ID)
		ch <- prometheus.MustNewConstMetric(c.vcpu, prometheus.GaugeValue, float64(u.VCPU), t.ID)
		ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(u.MemoryMB), t.ID)
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(u.PausedSandboxes), t.ID)
	}
	c.svc.rateLimited.Collect(ch)
}
