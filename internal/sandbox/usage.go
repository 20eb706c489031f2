package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// MetricSample is a sandbox's use of its limits at one time, E2B's
// SandboxMetric: CPU as a percentage of all its CPUs (0-100) since the
// previous sample, memory in use and its limit, page cache, and how much of
// its disk its writable layer fills, in bytes.
type MetricSample struct {
	Time       time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	MemCache   uint64
	DiskUsed   uint64
	DiskTotal  uint64
}

// usage samples every running sandbox every interval from the host (the
// runtime's cgroup and disk figures: nothing the sandbox could fake) and
// keeps each sandbox's series.
type usage struct {
	svc      *Service
	rd       runtime.UsageReader
	interval time.Duration

	mu     sync.Mutex
	series map[string]*series
	// samples publishes every sample as it is taken (FollowMetrics).
	samples feed[SandboxSample]
}

// SandboxSample is a sample as Telemetry publishes it: whose sandbox it is
// of, and that sandbox's tenant, with it.
type SandboxSample struct {
	Sandbox, Tenant string
	MetricSample
}

// series is one sandbox's samples: the last hour as taken, older ones as
// summaries for the rest of its life (history).
type series struct {
	recent  ring[MetricSample]
	history history
	acc     accumulator
	// The instance the last CPU reading is of (a resume makes a new one,
	// whose CPU time starts from zero), the reading and when it was taken.
	inst *entry
	// sampledInst is the instance of the newest sample in recent.
	sampledInst *entry
	cpu         time.Duration
	readAt      time.Time
	sampled     time.Time
}

func newUsage(svc *Service, rd runtime.UsageReader, interval time.Duration) *usage {
	return &usage{svc: svc, rd: rd, interval: interval, series: map[string]*series{}}
}

func (u *usage) newSeries() *series {
	return &series{
		recent:  ring[MetricSample]{max: min(maxRecent, max(1, int(recentWindow/u.interval)))},
		history: history{step: summaryStep},
	}
}

// run samples until ctx ends. It wakes every second (or interval, if
// shorter) so that a new sandbox gets its first reading at once, and its
// first sample one interval later; each sandbox is sampled once per
// interval.
func (u *usage) run(ctx context.Context) {
	if u.rd == nil {
		return
	}
	tick := min(time.Second, u.interval)
	t := time.NewTicker(tick)
	defer t.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			u.tick(ctx, now)
		case <-sweep.C:
			u.sweep(ctx)
		}
	}
}

// target is a running sandbox to sample.
type target struct {
	id     string
	tenant string
	e      *entry
	cpus   int
	mem    uint64
	disk   uint64
	// frozen: the sandbox rests (in the freezer, or hibernated), so
	// nothing in it moves.
	frozen bool
}

// runningTargets lists the running sandboxes callers can see (not pooled,
// not build sandboxes). An entry whose lock is held (a pause, a kill) is
// skipped this time rather than waited for.
func (s *Service) runningTargets() []target {
	var out []target
	for id, e := range s.live.byID() {
		if e.build != "" || !e.mu.TryLock() {
			continue
		}
		rec := e.rec
		if rec.State == store.StateRunning && rec.Ending == "" {
			r := e.rest()
			out = append(out, target{id: id, tenant: rec.Tenant, e: e, cpus: rec.CPU, mem: uint64(rec.MemoryMB) << 20, disk: uint64(rec.DiskMB) << 20,
				frozen: r != nil && r.tier() != RestAwake})
		}
		e.mu.Unlock()
	}
	return out
}

// tick samples each running sandbox whose last sample is an interval old.
func (u *usage) tick(ctx context.Context, now time.Time) {
	for _, t := range u.svc.runningTargets() {
		u.mu.Lock()
		s, ok := u.series[t.id]
		if !ok {
			s = u.newSeries()
			u.series[t.id] = s
		}
		due := s.inst != t.e || now.Sub(s.sampled) >= u.interval-u.interval/10
		u.mu.Unlock()
		if !due {
			continue
		}
		if t.frozen && u.sampleFrozen(t, s) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := u.rd.Usage(rctx, t.id)
		cancel()
		if err != nil {
			if !errors.Is(err, errdefs.ErrNotFound) {
				u.svc.log.Debug("sample sandbox usage", "sandbox", t.id, "err", err)
			}
			continue
		}
		at := time.Now()
		u.mu.Lock()
		if s.inst != t.e || got.CPU < s.cpu {
			// The first reading of this instance: nothing to compare yet.
			s.inst, s.cpu, s.readAt, s.sampled = t.e, got.CPU, at, at
			u.mu.Unlock()
			continue
		}
		m := MetricSample{
			Time:       at.UTC(),
			CPUCount:   t.cpus,
			CPUUsedPct: cpuPct(got.CPU-s.cpu, at.Sub(s.readAt), t.cpus),
			MemUsed:    got.Memory, MemTotal: t.mem, MemCache: got.MemoryCache,
			DiskUsed: got.Disk, DiskTotal: t.disk,
		}
		s.add(m)
		s.sampledInst = t.e
		// Under u.mu, so that follow's snapshot and this are in order.
		u.samples.publish(t.id, SandboxSample{Sandbox: t.id, Tenant: t.tenant, MetricSample: m})
		s.cpu, s.readAt, s.sampled = got.CPU, at, at
		u.mu.Unlock()
	}
}

// sampleFrozen samples a frozen sandbox without reading the host: in the
// freezer it uses no CPU and its memory and writable layer stay as they
// were, so its sample is its last one at 0% CPU, and its CPU reading
// stands as of now (the next reading after a thaw counts from here). A
// sandbox without a sample of its current instance yet is read as usual
// (false). Reading each resting sandbox's cgroups and layer every interval
// was most of what a frozen sandbox still cost the host.
func (u *usage) sampleFrozen(t target, s *series) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	last, ok := s.recent.last()
	if !ok || s.inst != t.e || s.sampledInst != t.e {
		return false
	}
	at := time.Now()
	m := last
	m.Time, m.CPUUsedPct = at.UTC(), 0
	s.add(m)
	u.samples.publish(t.id, SandboxSample{Sandbox: t.id, Tenant: t.tenant, MetricSample: m})
	s.readAt, s.sampled = at, at
	return true
}

// cpuPct is the CPU time used over wall time elapsed, as a percentage of
// cpus CPUs, rounded to hundredths as E2B reports it.
func cpuPct(used, elapsed time.Duration, cpus int) float64 {
	if elapsed <= 0 || cpus <= 0 {
		return 0
	}
	pct := float64(used) / float64(elapsed) / float64(cpus) * 100
	pct = min(max(pct, 0), 100)
	return float64(int64(pct*100+0.5)) / 100
}

// add keeps m, and folds it into the summary of its step.
func (s *series) add(m MetricSample) {
	s.recent.push(m)
	bucket := m.Time.Truncate(s.history.step)
	if s.acc.n > 0 && !bucket.Equal(s.acc.bucket) {
		s.history.push(s.acc)
		s.acc = accumulator{}
	}
	s.acc.add(bucket, m)
}

// history is a sandbox's summaries for its whole life in bounded memory:
// each sums up one step of samples (a minute at first). When maxSummaries
// are kept, each two neighbours become one and the step doubles: a day is
// kept by the minute, a week by 8 minutes, a month by 32.
type history struct {
	step time.Duration
	sums []accumulator
}

func (h *history) push(a accumulator) {
	if len(h.sums) >= maxSummaries {
		n := 0
		for i := 0; i < len(h.sums); i += 2 {
			if i+1 < len(h.sums) {
				h.sums[n] = h.sums[i].merge(h.sums[i+1])
			} else {
				h.sums[n] = h.sums[i]
			}
			n++
		}
		clear(h.sums[n:])
		h.sums = h.sums[:n]
		h.step *= 2
	}
	h.sums = append(h.sums, a)
}

// accumulator sums one step of samples: CPU is averaged, memory is the
// peak (a summary should not hide what came close to the limit), cache and
// disk are the last.
type accumulator struct {
	bucket time.Time
	n      int
	cpu    float64
	mem    uint64
	last   MetricSample
}

func (a *accumulator) add(bucket time.Time, m MetricSample) {
	a.bucket = bucket
	a.n++
	a.cpu += m.CPUUsedPct
	a.mem = max(a.mem, m.MemUsed)
	a.last = m
}

// merge sums up a and the one after it, b.
func (a accumulator) merge(b accumulator) accumulator {
	return accumulator{bucket: a.bucket, n: a.n + b.n, cpu: a.cpu + b.cpu, mem: max(a.mem, b.mem), last: b.last}
}

func (a accumulator) summary() MetricSample {
	m := a.last
	m.CPUUsedPct = float64(int64(a.cpu/float64(a.n)*100+0.5)) / 100
	m.MemUsed = a.mem
	return m
}

// between returns id's samples between from and to (zero: open): the
// summaries older than every sample still kept as taken, then those.
func (u *usage) between(id string, from, to time.Time) []MetricSample {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := []MetricSample{}
	s, ok := u.series[id]
	if !ok {
		return out
	}
	in := func(m MetricSample) bool {
		return (from.IsZero() || !m.Time.Before(from)) && (to.IsZero() || !m.Time.After(to))
	}
	oldest, haveRecent := s.recent.first()
	for i := range s.history.sums {
		m := s.history.sums[i].summary()
		if haveRecent && !m.Time.Before(oldest.Time) {
			break
		}
		if in(m) {
			out = append(out, m)
		}
	}
	s.recent.each(func(m MetricSample) bool {
		if in(m) {
			out = append(out, m)
		}
		return true
	})
	return out
}

func (u *usage) latest(id string) (MetricSample, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s, ok := u.series[id]; ok {
		return s.recent.last()
	}
	return MetricSample{}, false
}

// follow returns the newest sample of each running sandbox (if taken in
// the last few intervals: one from before a pause is not its use now),
// and a channel of every sample taken after them, until cancel.
func (u *usage) follow() (now []SandboxSample, next <-chan SandboxSample, cancel func()) {
	targets := u.svc.runningTargets()
	u.mu.Lock()
	defer u.mu.Unlock()
	next, cancel = u.samples.subscribe("")
	for _, t := range targets {
		s, ok := u.series[t.id]
		if !ok {
			continue
		}
		if m, ok := s.recent.last(); ok && time.Since(m.Time) < 3*u.interval {
			now = append(now, SandboxSample{Sandbox: t.id, Tenant: t.tenant, MetricSample: m})
		}
	}
	return now, next, cancel
}

func (u *usage) forget(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.series, id)
}

// sweep drops the series of sandboxes whose record is gone, in case the
// journal missed their removal (a reset of the change feed).
func (u *usage) sweep(ctx context.Context) {
	u.mu.Lock()
	ids := make([]string, 0, len(u.series))
	for id := range u.series {
		ids = append(ids, id)
	}
	u.mu.Unlock()
	for _, id := range ids {
		if _, ok := u.svc.live.get(id); ok {
			continue
		}
		if _, err := u.svc.store.GetSandbox(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
			u.forget(id)
		}
	}
}
