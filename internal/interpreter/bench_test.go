package interpreter

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// benchLanguages are a cell per language for the benchmarks, and its
// stdout or main result.
var benchLanguages = []struct{ lang, code, want string }{
	{"python", "1+1", "2"},
	{"bash", "echo 2", "2\n"},
	{"javascript", "1 + 1", "2"},
}

// BenchmarkExecuteWarm is a run_code round trip over HTTP on a warm
// context of each language: request, execute on the kernel, NDJSON back
// to the last line. It reports the median and 99th percentile besides the
// mean.
func BenchmarkExecuteWarm(b *testing.B) {
	s := startServer(b, Config{})
	for _, bl := range benchLanguages {
		b.Run(bl.lang, func(b *testing.B) {
			body := map[string]any{"code": bl.code, "language": bl.lang}
			s.execute(b, body) // the first cell pays one-time costs
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				ls, status, msg := s.tryExecute(b.Context(), body, nil)
				samples = append(samples, time.Since(start))
				if status != http.StatusOK || ls.mainText() != bl.want && ls.stdout() != bl.want {
					b.Fatalf("%d %s %v", status, msg, ls)
				}
			}
			reportPercentiles(b, samples)
		})
	}
}

// BenchmarkContextStart is POST /contexts (a new kernel, ready for its
// first cell) of each language, for comparison; the context is deleted
// outside the timing.
func BenchmarkContextStart(b *testing.B) {
	s := startServer(b, Config{})
	for _, bl := range benchLanguages {
		b.Run(bl.lang, func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				var c struct{ ID string }
				if status, msg := s.call(b, "POST", "/contexts", map[string]any{"language": bl.lang}, &c); status != http.StatusOK {
					b.Fatalf("create: %d %s", status, msg)
				}
				samples = append(samples, time.Since(start))
				b.StopTimer()
				s.call(b, "DELETE", "/contexts/"+c.ID, nil, nil)
				b.StartTimer()
			}
			reportPercentiles(b, samples)
		})
	}
}

func reportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(p float64) float64 {
		return float64(samples[min(len(samples)-1, int(p*float64(len(samples))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkQuickFlush is BenchmarkExecuteWarm's python cell on two
// servers at once, cell for cell: one with the kernels' per-cell costs
// this server drops (quick flushes), one, the anchor, with ipykernel as it
// comes (PlainKernels). Run it in gVisor too (runsc do the test binary), where those
// costs are thread wake-ups.
func BenchmarkQuickFlush(b *testing.B) {
	quick := startServer(b, Config{})
	plain := startServer(b, Config{PlainKernels: true})
	body := map[string]any{"code": "1+1"}
	servers := []*testServer{quick, plain}
	samples := make([][]time.Duration, len(servers))
	for _, s := range servers {
		for range 5 {
			s.execute(b, body)
		}
	}
	for b.Loop() {
		for i, s := range servers {
			start := time.Now()
			ls, status, msg := s.tryExecute(b.Context(), body, nil)
			samples[i] = append(samples[i], time.Since(start))
			if status != http.StatusOK || ls.mainText() != "2" {
				b.Fatalf("%d %s %v", status, msg, ls)
			}
		}
	}
	b.StopTimer()
	p50 := func(s []time.Duration) float64 {
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	q, p := p50(samples[0]), p50(samples[1])
	b.ReportMetric(q, "quick-p50-ms")
	b.ReportMetric(p, "plain-p50-ms")
	b.ReportMetric(q/p, "quick/plain")
}
