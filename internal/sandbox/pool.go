package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// PoolConfig sizes the warm pool of one template. Max 0 turns it off.
type PoolConfig struct {
	Template string
	Min, Max int
}

// Pools are the node's warm pools, one per template at most: sandboxes
// booted ahead of demand that a create claims (create.go), sized by demand
// within bounds an admin may change (SetPool), given up to admission
// control when a start needs their room (admit.go), emptied while the node
// drains. They boot and tear down their sandboxes through the service's
// booter.
type Pools struct {
	svc        *Service
	byTemplate map[string]*pool
}

func newPools(svc *Service, cfgs []PoolConfig) *Pools {
	ps := &Pools{svc: svc, byTemplate: map[string]*pool{}}
	for _, pc := range cfgs {
		if pc.Max > 0 {
			ps.byTemplate[pc.Template] = newPool(svc, pc)
		}
	}
	return ps
}

// start fills the pools in the background until ctx ends; done counts
// their loops.
func (ps *Pools) start(ctx context.Context, done *sync.WaitGroup) {
	sem := make(chan struct{}, ps.svc.cfg.PoolBoots)
	for _, p := range ps.byTemplate {
		done.Add(1)
		go func() {
			defer done.Done()
			p.run(ctx, sem)
		}()
	}
}

// drain tears down every pool's ready sandboxes once their boots in
// flight are done; the pools take no more.
func (ps *Pools) drain() {
	for _, p := range ps.byTemplate {
		p.drain()
	}
}

// poolFor returns the pool that can serve req, if any: pool sandboxes have
// their template's limits, so a request for other limits boots its own
// unless the runtime can give them to a booted sandbox at claim.
func (ps *Pools) poolFor(req CreateRequest, img *Image) *pool {
	p := ps.byTemplate[req.Template]
	// Pool sandboxes boot without volumes (a mount is made at boot).
	if p == nil || req.NoPool || req.Snapshot != "" || len(req.Volumes) > 0 || !ps.resizable(ps.svc.limitsOf(img), req.limits()) {
		return nil
	}
	return p
}

// resizable reports whether a sandbox booted with from can be claimed by
// a request for to: the same limits, or others the runtime can give it in
// place (runtime.Resizer) without the guest seeing any difference from a
// sandbox booted with them.
func (ps *Pools) resizable(from, to runtime.Limits) bool {
	if from == to {
		return true
	}
	rs, ok := ps.svc.rt.(runtime.Resizer)
	return ok && rs.Resizable(from, to)
}

// PoolSizes returns the number of ready sandboxes per template.
func (ps *Pools) PoolSizes() map[string]int {
	out := map[string]int{}
	for t, p := range ps.byTemplate {
		out[t] = p.size()
	}
	return out
}

// size is how many sandboxes are ready across the pools.
func (ps *Pools) size() int {
	n := 0
	for _, p := range ps.byTemplate {
		n += p.size()
	}
	return n
}

// setDraining empties the pools and keeps them empty (on), or lets them
// refill now (off).
func (ps *Pools) setDraining(on bool) {
	for _, p := range ps.byTemplate {
		if on {
			p.prune(func(*booted) bool { return false })
		} else {
			p.kick()
		}
	}
}

// pool keeps booted sandboxes of one template (with the default limits)
// ready to be claimed. A pooled sandbox is claimed at most once: nothing of
// one caller can reach the next. The pool refills in the background,
// through a semaphore shared by all pools so refills never take more than
// a bounded share of the machine from API calls, and sizes itself from
// demand: a miss (a create that found it empty) raises the target, a quiet
// minute lowers it, always within [Min, Max].
type pool struct {
	cfg PoolConfig
	svc *Service

	mu       sync.Mutex
	ready    []*booted
	booting  int
	target   int
	lastMiss time.Time
	// retryAt: a refill failed; none before then (unless woken).
	// failures counts the refills failed in a row (the backoff doubles
	// with each).
	retryAt  time.Time
	failures int
	// held is why admission control holds the refills back now (the
	// refusal's message), "" while they may go on.
	held   string
	closed bool
	wake   chan struct{}
	fills  sync.WaitGroup
}

func newPool(svc *Service, cfg PoolConfig) *pool {
	return &pool{cfg: cfg, svc: svc, target: cfg.Min, wake: make(chan struct{}, 1)}
}

// take returns a ready sandbox of image, or nil when the pool has none.
// Sandboxes of another image (booted before the template was rebuilt)
// are torn down.
func (p *pool) take(image string) *booted {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kick()
	for len(p.ready) > 0 {
		b := p.ready[0]
		p.ready = p.ready[1:]
		if b.rec.Image == image {
			return b
		}
		go b.undo()
	}
	p.lastMiss = time.Now()
	if p.target < p.cfg.Max {
		p.target = min(p.cfg.Max, p.target+max(1, p.target/2))
	}
	p.svc.metrics.poolMiss(p.cfg.Template)
	return nil
}

func (p *pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// release takes the oldest ready sandbox out of the pool for admission
// control to tear down, or nil. Unlike take it is no miss: the pool does
// not grow its target for it.
func (p *pool) release() *booted {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	b := p.ready[0]
	p.ready = p.ready[1:]
	return b
}

// holdRefills stops refills for d (unless a template change wakes it).
func (p *pool) holdRefills(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retryAt = maxTime(p.retryAt, time.Now().Add(d))
}

// size returns how many sandboxes are ready.
func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// run keeps the pool at its target until ctx ends.
func (p *pool) run(ctx context.Context, sem chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		p.mu.Lock()
		if p.target > p.cfg.Min && time.Since(p.lastMiss) > time.Minute {
			p.target--
			p.lastMiss = time.Now() // one step per quiet minute
		}
		need := p.target - len(p.ready) - p.booting
		if time.Now().Before(p.retryAt) || p.svc.nodeDraining.Load() {
			need = 0
		}
		p.mu.Unlock()
		for ; need > 0; need-- {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			// A refill takes the node's memory too: pools fill only
			// admission.PoolShare of each budget, the rest is the callers'.
			// Near it they wait for the next tick.
			r, ref := p.svc.adm.Admit(p.svc.admits.need(p.svc.cfg.Defaults.MemoryMB, 0, 0, false).PoolNeed())
			p.setHeld(ref)
			if ref != nil {
				<-sem
				break
			}
			p.mu.Lock()
			p.booting++
			p.mu.Unlock()
			p.fills.Add(1)
			go func() {
				defer func() { <-sem; p.fills.Done() }()
				p.fill(ctx, r)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// setHeld records whether admission control holds the refills back (ref
// is its refusal, nil when it admitted one), and logs when that changes:
// a pool that stays empty says why.
func (p *pool) setHeld(ref *admission.Refusal) {
	held := ""
	if ref != nil {
		held = ref.Error()
	}
	p.mu.Lock()
	was := p.held
	p.held = held
	p.mu.Unlock()
	switch {
	case held != "" && was == "":
		p.svc.log.Info("pool refills held by the node's budget", "template", p.cfg.Template, "reason", held)
	case held == "" && was != "":
		p.svc.log.Info("pool refills go on", "template", p.cfg.Template)
	}
}

func (p *pool) fill(ctx context.Context, r *admission.Reservation) {
	// A boot is not cut short by shutdown (a half-killed runsc leaves
	// more to clean up than a finished one); drain tears it down after.
	img, err := p.svc.cfg.Templates.Resolve(ctx, p.cfg.Template)
	var b *booted
	if err == nil {
		b, err = p.svc.booter.boot(context.WithoutCancel(ctx), bootSpec{img: img, limits: p.svc.limitsOf(img), state: store.StatePooled})
	}
	p.mu.Lock()
	p.booting--
	if err != nil {
		p.failures++
		failures := p.failures
		p.mu.Unlock()
		r.Cancel()
		backoff := refillBackoff(failures)
		if errors.Is(err, errdefs.ErrNotFound) {
			// A pool for a template not built yet: look again now and
			// then, or when the template changes.
			backoff = 30 * time.Second
			p.svc.log.Debug("pool template not found", "template", p.cfg.Template)
		} else {
			p.svc.log.Warn("pool refill failed", "template", p.cfg.Template, "failures_in_a_row", failures, "next_try_in", backoff, "err", err)
		}
		p.mu.Lock()
		p.retryAt = time.Now().Add(backoff)
		p.mu.Unlock()
		return
	}
	if p.closed || len(p.ready) >= p.cfg.Max {
		// Drained, or resized below what it holds while this boot ran.
		p.mu.Unlock()
		b.undo()
		r.Cancel()
		return
	}
	id := b.rec.ID // once ready, a claim may rewrite b.rec at any time
	p.ready = append(p.ready, b)
	p.failures = 0
	p.mu.Unlock()
	r.Done(ctx, id)
}

// drain waits for boots in flight, then tears down every ready sandbox;
// the pool takes no more.
func (p *pool) drain() {
	p.fills.Wait()
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, b := range ready {
		b.undo()
	}
}

// TemplateChanged wakes the pools of template name (any of its tags): a
// build finished or a tag moved, so a pool that found no image, or has
// sandboxes of an older one, refills now rather than at its next retry.
func (ps *Pools) TemplateChanged(name string) {
	for ref, p := range ps.byTemplate {
		if n, _, _ := strings.Cut(ref, ":"); n == name {
			p.mu.Lock()
			p.retryAt, p.failures = time.Time{}, 0
			p.mu.Unlock()
			p.kick()
		}
	}
}

// prune tears down the ready sandboxes keep refuses.
func (p *pool) prune(keep func(*booted) bool) int {
	p.mu.Lock()
	var gone []*booted
	kept := p.ready[:0]
	for _, b := range p.ready {
		if keep(b) {
			kept = append(kept, b)
		} else {
			gone = append(gone, b)
		}
	}
	p.ready = kept
	p.mu.Unlock()
	for _, b := range gone {
		b.undo()
	}
	if len(gone) > 0 {
		p.kick()
	}
	return len(gone)
}

// refillBackoff is the wait after the nth refill failure in a row: 2 s,
// doubling to a minute. A template whose every boot fails (a start
// checkpoint this node cannot restore) would otherwise cost a boot every
// 2 s for as long as spaced runs.
func refillBackoff(n int) time.Duration {
	d := 2 * time.Second
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}
