package admission

import "github.com/prometheus/client_golang/prometheus"

// Collector reports the budgets and their use at scrape time:
// space_node_budget and space_node_used (bytes for memory and disk, a
// count for sandboxes; used includes the reservations of starts in
// flight), space_node_reserved, space_node_host_available (what the host
// has free, as last sampled) and space_admission_refusals_total.
func Collector(c *Controller) prometheus.Collector {
	return collector{
		c:         c,
		budget:    prometheus.NewDesc("space_node_budget", "What this node's sandboxes may take, by resource (memory and disk in bytes, sandboxes a count).", []string{"resource"}, nil),
		used:      prometheus.NewDesc("space_node_used", "What this node's sandboxes take, as measured, plus what starts in flight are reserved, by resource.", []string{"resource"}, nil),
		reserved:  prometheus.NewDesc("space_node_reserved", "What admitted starts not measured yet are reserved, by resource.", []string{"resource"}, nil),
		available: prometheus.NewDesc("space_node_host_available", "What the host has free (MemAvailable; the data disk's free space), in bytes, as last sampled.", []string{"resource"}, nil),
		refusals:  prometheus.NewDesc("space_admission_refusals_total", "Creates, resumes and forks refused because the node was at a budget (scope node) or the host short (scope host).", []string{"resource", "scope"}, nil),
	}
}

type collector struct {
	c                                           *Controller
	budget, used, reserved, available, refusals *prometheus.Desc
}

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.budget, m.used, m.reserved, m.available, m.refusals} {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	if m.c == nil {
		return
	}
	b, t := m.c.Budget(), m.c.Totals()
	gauge := func(d *prometheus.Desc, v float64, res Resource) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, string(res))
	}
	gauge(m.budget, float64(b.MemoryBytes), Memory)
	gauge(m.budget, float64(b.DiskBytes), Disk)
	gauge(m.budget, float64(b.Sandboxes), Sandboxes)
	gauge(m.used, float64(t.Used.Memory+t.Pending.Memory), Memory)
	gauge(m.used, float64(t.Used.Disk+t.Pending.Disk), Disk)
	gauge(m.used, float64(t.Count+t.PendingCount), Sandboxes)
	gauge(m.reserved, float64(t.Pending.Memory), Memory)
	gauge(m.reserved, float64(t.Pending.Disk), Disk)
	gauge(m.reserved, float64(t.PendingCount), Sandboxes)
	gauge(m.available, float64(t.Host.MemAvailable), Memory)
	gauge(m.available, float64(t.Host.DiskFree), Disk)
	for _, res := range []Resource{Memory, Disk, Sandboxes} {
		for _, scope := range []string{"node", "host"} {
			if res == Sandboxes && scope == "host" {
				continue
			}
			n := m.c.Refusals()[[2]string{string(res), scope}]
			ch <- prometheus.MustNewConstMetric(m.refusals, prometheus.CounterValue, float64(n), string(res), scope)
		}
	}
}
