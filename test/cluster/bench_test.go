package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// BenchmarkCreateForwarding measures creates through the node that runs
// the new sandbox (the owner) and through another node, which places the
// create on the owner and forwards it there, interleaved in one run. The
// other node is drained (with nothing on it) so that placement always
// sends its creates to the owner. Every create is a warm one: the owner
// keeps a pool of one, and each create waits until it is ready (a cold
// boot would hide the forward in its own time); each is followed by its
// kill, outside the time measured. It prints p50 and p90 of both and what
// the forward adds at p50.
//
//	go test -run '^$' -bench CreateForwarding -benchtime 100x ./test/cluster/
func BenchmarkCreateForwarding(b *testing.B) {
	c := newClusterWith(b, 14, 0, 2, func(int) []string { return []string{"SPACE_POOL=base=1:1"} })
	owner, other := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(b, 20*time.Minute)
	if _, err := owner.Client.DrainNode(ctx, other.Opts.Name); err != nil {
		b.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // placement's view of the nodes is a second old
	create := func(via *harness.Daemon) (time.Duration, error) {
		poolReady(b, owner, "base")
		start := time.Now()
		sb, err := via.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		took := time.Since(start)
		if err != nil {
			return 0, err
		}
		if sb.Node != owner.Opts.Name {
			return 0, fmt.Errorf("a create through %s ran on %s, not the owner %s", via.Opts.Name, sb.Node, owner.Opts.Name)
		}
		return took, via.Client.KillSandbox(ctx, sb.ID)
	}
	for range 3 { // warm both paths
		create(owner)
		create(other)
	}
	const misses = `space_pool_misses_total{template="base"}`
	missed := metric(b, owner, misses)
	var direct, forwarded []time.Duration
	b.ResetTimer()
	for range b.N {
		for _, via := range []*harness.Daemon{owner, other} {
			took, err := create(via)
			if err != nil {
				b.Fatal(err)
			}
			if via == owner {
				direct = append(direct, took)
			} else {
				forwarded = append(forwarded, took)
			}
		}
	}
	b.StopTimer()
	if n := metric(b, owner, misses) - missed; n > 0 {
		b.Errorf("%.0f of the creates found no ready pool sandbox: the figures mix cold creates in", n)
	}
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(direct, 0.5), "owner-p50-ms")
	b.ReportMetric(p(direct, 0.9), "owner-p90-ms")
	b.ReportMetric(p(forwarded, 0.5), "forwarded-p50-ms")
	b.ReportMetric(p(forwarded, 0.9), "forwarded-p90-ms")
	b.ReportMetric(p(forwarded, 0.5)-p(direct, 0.5), "added-p50-ms")
	b.Logf("warm creates through the owner: p50 %.1f ms, p90 %.1f ms; through another node: p50 %.1f ms, p90 %.1f ms (%d each)",
		p(direct, 0.5), p(direct, 0.9), p(forwarded, 0.5), p(forwarded, 0.9), len(direct))
}

// BenchmarkMigration drains a node holding one sandbox to another and
// reports the move's pause-to-running time, for an idle sandbox and one
// holding 256 MiB it touched (a process keeps it). Each iteration moves
// the sandbox back and forth (a drain, then an undrain).
//
//	go test -run '^$' -bench Migration -benchtime 5x ./test/cluster/
func BenchmarkMigration(b *testing.B) {
	c := newCluster(b, 6, 0, 2)
	ctx := harness.Ctx(b, 20*time.Minute)
	for _, mib := range []int{0, 256} {
		b.Run(strconv.Itoa(mib)+"MiB", func(b *testing.B) {
			sb, err := c.nodes[0].Client.CreateSandbox(ctx, client.CreateSandboxRequest{MemoryMB: 1024, TimeoutSeconds: 3600})
			if err != nil {
				b.Fatal(err)
			}
			defer c.nodes[0].Client.KillSandbox(ctx, sb.ID)
			if mib > 0 {
				cmd := fmt.Sprintf("nohup python3 -c 'import time; b = bytearray(%d << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(86400)' >/dev/null 2>&1 & sleep 2", mib)
				if _, err := c.nodes[0].Exec(ctx, sb.ID, client.CommandRequest{Cmd: cmd}); err != nil {
					b.Fatal(err)
				}
			}
			var total, pause, resume []time.Duration
			from := 0
			b.ResetTimer()
			for range b.N {
				node := c.nodes[from]
				st, err := c.nodes[1-from].Client.GetSandbox(ctx, sb.ID)
				if err != nil || st.Node != node.Opts.Name {
					b.Fatalf("before the move the sandbox is on %v (%v), want %s", st, err, node.Opts.Name)
				}
				r, err := c.nodes[1-from].Client.DrainNode(ctx, node.Opts.Name)
				if err != nil || len(r.Moves) != 1 || r.Moves[0].Error != "" {
					b.Fatalf("drain: %+v, %v", r, err)
				}
				m := r.Moves[0]
				total = append(total, time.Duration(m.TotalMS)*time.Millisecond)
				pause = append(pause, time.Duration(m.PauseMS)*time.Millisecond)
				resume = append(resume, time.Duration(m.ResumeMS)*time.Millisecond)
				if err := c.nodes[1-from].Client.UndrainNode(ctx, node.Opts.Name); err != nil {
					b.Fatal(err)
				}
				from = 1 - from
			}
			b.StopTimer()
			med := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Milliseconds())
			}
			b.ReportMetric(med(pause), "pause-p50-ms")
			b.ReportMetric(med(resume), "resume-p50-ms")
			b.ReportMetric(med(total), "pause-to-running-p50-ms")
		})
	}
}

// BenchmarkCreates measures creates per second, each followed by its
// kill, 8 at a time, against one node and against three nodes on this
// same machine with the creates spread over them (as a load balancer in
// front of the Service would).
//
//	go test -run '^$' -bench Creates -benchtime 60x ./test/cluster/
func BenchmarkCreates(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"nodes", func(b *testing.B) {
			c := newCluster(b, 8+n, 0, n)
			ctx := harness.Ctx(b, 20*time.Minute)
			sem := make(chan struct{}, 8)
			var wg sync.WaitGroup
			var failed atomic.Int32
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					d := c.nodes[i%n]
					sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
					if err != nil {
						failed.Add(1)
						return
					}
					d.Client.KillSandbox(ctx, sb.ID)
				})
			}
			wg.Wait()
			b.StopTimer()
			if failed.Load() > 0 {
				b.Errorf("%d creates failed", failed.Load())
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
		})
	}
}
