package tenant

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector reports each tenant's usage at scrape time (space_tenant_<the
// quota's name>), and the creates its rate refused.
type Collector struct {
	svc   *Service
	usage func(ctx context.Context, tenant string) (Usage, error)
	descs []*prometheus.Desc // one per quota, in quotas' order
}

// usageHelp says what each quota's series counts.
var usageHelp = map[string]string{
	"sandboxes":        "Running sandboxes of a tenant (creates in flight included).",
	"builds":           "Template builds of a tenant, queued or running.",
	"vcpu":             "Sum of the cpu limits of a tenant's running sandboxes and builds.",
	"memory_mb":        "Sum of the memory limits of a tenant's running sandboxes and builds.",
	"paused_sandboxes": "Paused sandboxes of a tenant.",
	"paused_mb":        "MiB the checkpoints of a tenant's paused sandboxes take in the object store.",
	"snapshots":        "Snapshots of a tenant.",
	"snapshot_mb":      "MiB a tenant's snapshots take in the object store.",
	"templates":        "Templates of a tenant.",
	"template_mb":      "MiB of the builds a tenant's templates' tags point at.",
}

// NewCollector returns the tenants' series; usage reads what a tenant
// holds (the service's Usage).
func NewCollector(svc *Service, usage func(ctx context.Context, tenant string) (Usage, error)) *Collector {
	c := &Collector{svc: svc, usage: usage}
	for _, q := range quotas {
		c.descs = append(c.descs, prometheus.NewDesc("space_tenant_"+q.name, usageHelp[q.name], []string{"tenant"}, nil))
	}
	return c
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	c.svc.rateLimited.Describe(ch)
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.svc.Tenants() {
		u, err := c.usage(context.Background(), t.ID)
		if err != nil {
			c.svc.log.Warn("tenant usage for metrics", "tenant", t.ID, "err", err)
			continue
		}
		for i, q := range quotas {
			ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.GaugeValue, float64(*q.use(&u)), t.ID)
		}
	}
	c.svc.rateLimited.Collect(ch)
}
