package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// BenchmarkForwarding measures what a request pays when it lands on a node
// that does not run its sandbox: the same request through the owner and
// through another node, interleaved, in one run. get is GET
// /v1/sandboxes/{id} (the forward is most of its cost), exec a command
// `true` with its event stream.
//
//	go test -run '^$' -bench Forwarding -benchtime 200x ./test/cluster/
func BenchmarkForwarding(b *testing.B) {
	c := newCluster(b, 4, 0, 2)
	owner, other := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(b, 10*time.Minute)
	sb, err := owner.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer owner.Client.KillSandbox(ctx, sb.ID)
	ops := map[string]func(d *harness.Daemon) error{
		"get": func(d *harness.Daemon) error { _, err := d.Client.GetSandbox(ctx, sb.ID); return err },
		"exec": func(d *harness.Daemon) error {
			_, err := d.Exec(ctx, sb.ID, client.CommandRequest{Cmd: "true"})
			return err
		},
	}
	for _, name := range []string{"get", "exec"} {
		op := ops[name]
		b.Run(name, func(b *testing.B) {
			var direct, forwarded []time.Duration
			for range 5 { // warm both paths
				op(owner)
				op(other)
			}
			b.ResetTimer()
			for range b.N {
				for _, via := range []*harness.Daemon{owner, other} {
					start := time.Now()
					if err := op(via); err != nil {
						b.Fatal(err)
					}
					if via == owner {
						direct = append(direct, time.Since(start))
					} else {
						forwarded = append(forwarded, time.Since(start))
					}
				}
			}
			b.StopTimer()
			p := func(d []time.Duration, q float64) float64 {
				slices.Sort(d)
				return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(p(direct, 0.5), "owner-p50-ms")
			b.ReportMetric(p(direct, 0.9), "owner-p90-ms")
			b.ReportMetric(p(forwarded, 0.5), "forwarded-p50-ms")
			b.ReportMetric(p(forwarded, 0.9), "forwarded-p90-ms")
			b.ReportMetric(p(forwarded, 0.5)-p(direct, 0.5), "added-p50-ms")
		})
	}
}
