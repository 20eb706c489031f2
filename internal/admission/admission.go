// Package admission decides whether this node may start one more sandbox.
// A node has three budgets: the memory and the disk its sandboxes may take,
// and how many it may hold. Use is what the sandboxes really take on the
// host (sampled about once a second from the runtime, and at once for a
// sandbox that has just started or ended), plus a reservation for every
// start that was admitted and has not been measured yet, so a burst of
// creates cannot all pass one check against one sample. Besides the
// budgets, what the host itself has left (MemAvailable, the data disk's
// free space) must stay above a floor, since other programs share it.
//
// A check is a few additions under a mutex: creates that take a pooled
// sandbox in milliseconds can afford it.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Resource names a budget.
type Resource string

const (
	Memory    Resource = "memory"
	Disk      Resource = "disk"
	Sandboxes Resource = "sandboxes"
)

// Budget is what this node's sandboxes may take. A zero field is no limit.
type Budget struct {
	MemoryBytes int64
	DiskBytes   int64
	Sandboxes   int
	// MemoryFloor and DiskFloor are what must stay free on the host
	// (MemAvailable, the data disk's free space), whatever the budgets say.
	MemoryFloor int64
	DiskFloor   int64
}

// PoolShare is the part of each budget warm pools may fill: the rest is
// kept for creates, resumes and forks, which pools make room for by giving
// their sandboxes up.
const PoolShare = 0.9

// Usage is what one sandbox takes, or what one start will.
type Usage struct {
	Memory, Disk int64 // bytes
}

// Host is what the machine has.
type Host struct {
	MemTotal, MemAvailable int64
	DiskTotal, DiskFree    int64
}

// Need is what one start asks for.
type Need struct {
	Usage
	// Pool: a warm-pool refill, held to PoolShare of each budget.
	Pool bool
	// Fresh: a boot of a template image (not a restore); what it is
	// measured at when done teaches the estimate of the next one.
	Fresh bool
}

// Sampler measures the node's sandboxes.
type Sampler interface {
	// All returns what every sandbox the runtime holds takes now.
	All(ctx context.Context) (map[string]Usage, error)
	// One returns what sandbox id takes now.
	One(ctx context.Context, id string) (Usage, error)
}

// Config of a Controller.
type Config struct {
	Budget  Budget
	Sampler Sampler
	// Host reads the machine (ReadHost); nil: no host floors.
	Host func() (Host, error)
	// Count is how many sandboxes the node holds (live and pooled); starts
	// in flight are counted by their reservations.
	Count  func() int
	Logger *slog.Logger
}

// Controller admits starts against the budgets. A nil *Controller admits
// everything.
type Controller struct {
	cfg Config

	mu   sync.Mutex
	host Host
	// usage per sandbox, from the last sample and measurements since.
	usage map[string]Usage
	// unseen is what sandboxes measured after the last host sample take:
	// the host sample does not show it yet.
	unseen  Usage
	pending map[*Reservation]struct{}
	// estimate is what a fresh boot is reserved until it is measured,
	// learnt from the boots measured so far.
	estimate Usage

	refusals map[[2]string]uint64
}

// Initial estimate of a fresh boot, before any was measured (an idle
// sandbox takes 14-20 MiB of memory on the machines measured).
const (
	initialMemoryEstimate = 32 << 20
	initialDiskEstimate   = 1 << 20
)

// New returns a controller; Refresh or Run fills in its first sample.
func New(cfg Config) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Count == nil {
		cfg.Count = func() int { return 0 }
	}
	return &Controller{
		cfg: cfg, usage: map[string]Usage{}, pending: map[*Reservation]struct{}{},
		estimate: Usage{Memory: initialMemoryEstimate, Disk: initialDiskEstimate},
		refusals: map[[2]string]uint64{},
	}
}

// Budget returns the budgets.
func (c *Controller) Budget() Budget { return c.cfg.Budget }

// Estimate is what a fresh boot of a sandbox whose memory limit is
// limitBytes is reserved: what boots were measured at, at most its limit.
func (c *Controller) Estimate(limitBytes int64) Usage {
	if c == nil {
		return Usage{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.estimate
	if limitBytes > 0 && e.Memory > limitBytes {
		e.Memory = limitBytes
	}
	return e
}

// Usage returns what sandbox id took when last measured.
func (c *Controller) Usage(id string) Usage {
	if c == nil {
		return Usage{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage[id]
}

// Reservation holds what an admitted start will take until the sandbox is
// measured (Done) or the start fails (Cancel).
type Reservation struct {
	c    *Controller
	need Need
	once sync.Once
}

// Admit reserves need, or says which budget refuses it (Refusal.Err is
// the error for the caller).
func (c *Controller) Admit(need Need) (*Reservation, *Refusal) {
	if c == nil {
		return nil, nil
	}
	count := c.cfg.Count()
	c.mu.Lock()
	r := decide(c.cfg.Budget, c.totalsLocked(count), need)
	c.mu.Unlock()
	if r != nil && r.Scope == "host" && c.cfg.Host != nil {
		// The host sample may be a second old, and the host's memory and
		// disk change without us (space freed, another program gone): a
		// refusal for the host's sake is decided again on a fresh reading
		// (a file read and a statfs).
		if h, err := c.cfg.Host(); err == nil {
			c.mu.Lock()
			c.host, c.unseen = h, Usage{}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r != nil && r.Scope == "host" {
		r = decide(c.cfg.Budget, c.totalsLocked(count), need)
	}
	if r != nil {
		return nil, r
	}
	res := &Reservation{c: c, need: need}
	c.pending[res] = struct{}{}
	return res, nil
}

// Refused counts a refusal the caller gives up on (after pools shrank).
func (c *Controller) Refused(r *Refusal) {
	if c == nil || r == nil {
		return
	}
	c.mu.Lock()
	c.refusals[[2]string{string(r.Resource), r.Scope}]++
	c.mu.Unlock()
}

// Done measures sandbox id, the start r admitted, and releases r: from now
// on the sandbox counts with what it takes.
func (r *Reservation) Done(ctx context.Context, id string) {
	if r == nil {
		return
	}
	r.once.Do(func() {
		c := r.c
		u, err := c.cfg.Sampler.One(ctx, id)
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.pending, r)
		if err != nil {
			// Not measured: it counts with the estimate until the next sample.
			u = r.need.Usage
		}
		c.unseen.Memory += u.Memory - c.usage[id].Memory
		c.unseen.Disk += u.Disk - c.usage[id].Disk
		c.usage[id] = u
		if r.need.Fresh && err == nil && u.Memory > 0 {
			// A moving average: one odd boot does not swing it.
			c.estimate.Memory += (u.Memory - c.estimate.Memory) / 8
			c.estimate.Disk += (u.Disk - c.estimate.Disk) / 8
		}
	})
}

// Cancel releases r: the start failed and left nothing.
func (r *Reservation) Cancel() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		r.c.mu.Lock()
		delete(r.c.pending, r)
		r.c.mu.Unlock()
	})
}

// Forget drops sandbox id, which has ended: what it took is free again
// without waiting for the next sample.
func (c *Controller) Forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.usage[id]
	delete(c.usage, id)
	c.unseen.Memory -= u.Memory
	c.unseen.Disk -= u.Disk
}

// Refresh samples every sandbox and the host.
func (c *Controller) Refresh(ctx context.Context) error {
	if c == nil {
		return nil
	}
	var host Host
	var herr error
	if c.cfg.Host != nil {
		host, herr = c.cfg.Host()
	}
	all, err := c.cfg.Sampler.All(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.usage = all
	}
	if herr == nil {
		c.host, c.unseen = host, Usage{}
	}
	if err != nil {
		return fmt.Errorf("sample sandboxes: %w", err)
	}
	if herr != nil {
		return fmt.Errorf("sample host: %w", herr)
	}
	return nil
}

// Run refreshes every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	if c == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Refresh(ctx); err != nil && !failing {
			c.cfg.Logger.Warn("admission: sampling failed; deciding on the last sample", "err", err)
			failing = true
		} else if err == nil {
			failing = false
		}
	}
}

// Totals are the numbers a decision is made on.
type Totals struct {
	// Used is what sandboxes were measured at; Count how many the node
	// holds.
	Used  Usage
	Count int
	// Pending is what admitted starts not measured yet are reserved.
	Pending      Usage
	PendingCount int
	// Host, and what sandboxes measured since it was read take (Unseen).
	Host   Host
	Unseen Usage
}

func (c *Controller) totalsLocked(count int) Totals {
	t := Totals{Count: count, Host: c.host, Unseen: c.unseen, PendingCount: len(c.pending)}
	for _, u := range c.usage {
		t.Used.Memory += u.Memory
		t.Used.Disk += u.Disk
	}
	for r := range c.pending {
		t.Pending.Memory += r.need.Memory
		t.Pending.Disk += r.need.Disk
	}
	return t
}

// Totals returns the numbers the next decision would be made on.
func (c *Controller) Totals() Totals {
	if c == nil {
		return Totals{}
	}
	count := c.cfg.Count()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.totalsLocked(count)
}

// Refusals returns how many starts were refused, by resource and scope.
func (c *Controller) Refusals() map[[2]string]uint64 {
	out := map[[2]string]uint64{}
	if c == nil {
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.refusals {
		out[k] = v
	}
	return out
}

// Refusal says which budget a start would exceed. It is an error of class
// errdefs.ErrCapacity whose details (the API's error body) are itself.
type Refusal struct {
	Resource Resource `json:"resource"`
	// Scope is "node" for this node's budget, "host" for what the host
	// must keep free.
	Scope string `json:"scope"`
	// Unit of the numbers: "MiB" or "sandboxes".
	Unit string `json:"unit"`
	// Budget is the limit, Used what is taken or reserved now, Requested
	// what the start needs.
	Budget    int64 `json:"budget"`
	Used      int64 `json:"used"`
	Requested int64 `json:"requested"`
}

func (r *Refusal) Error() string {
	if r.Scope == "host" {
		return fmt.Sprintf("this node's host is short of %s: %d of the %d %s it may give sandboxes are taken, and one more needs %d; try again later or on another node",
			r.Resource, r.Used, r.Budget, r.Unit, r.Requested)
	}
	if r.Resource == Sandboxes {
		return fmt.Sprintf("this node is at its sandbox budget: it holds %d of %d sandboxes; try again later or on another node", r.Used, r.Budget)
	}
	return fmt.Sprintf("this node is at its %s budget: sandboxes take %d of %d %s and one more needs %d; try again later or on another node",
		r.Resource, r.Used, r.Budget, r.Unit, r.Requested)
}

// Is makes a refusal an errdefs.ErrCapacity.
func (r *Refusal) Is(target error) bool { return target == errdefs.ErrCapacity }

// Err is the refusal as the API shows it: class, message and details.
func (r *Refusal) Err() error {
	return errdefs.WithDetails(errdefs.ErrCapacity, r, "%s", r.Error())
}

const mib = 1 << 20

func mibUp(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + mib - 1) / mib
}

// decide refuses need when it would take the node past a budget or the
// host below a floor; nil admits it.
func decide(b Budget, t Totals, need Need) *Refusal {
	share := 1.0
	if need.Pool {
		share = PoolShare
	}
	if b.Sandboxes > 0 {
		used := int64(t.Count + t.PendingCount)
		if float64(used+1) > share*float64(b.Sandboxes) {
			return &Refusal{Resource: Sandboxes, Scope: "node", Unit: "sandboxes", Budget: int64(b.Sandboxes), Used: used, Requested: 1}
		}
	}
	for _, r := range []struct {
		res          Resource
		budget, used int64
		need         int64
	}{
		{Memory, b.MemoryBytes, t.Used.Memory + t.Pending.Memory, need.Memory},
		{Disk, b.DiskBytes, t.Used.Disk + t.Pending.Disk, need.Disk},
	} {
		if r.budget > 0 && float64(r.used+r.need) > share*float64(r.budget) {
			return &Refusal{Resource: r.res, Scope: "node", Unit: "MiB", Budget: r.budget / mib, Used: mibUp(r.used), Requested: mibUp(r.need)}
		}
	}
	for _, r := range []struct {
		res                   Resource
		total, avail, floor   int64
		pending, unseen, need int64
		budget                int64
	}{
		{Memory, t.Host.MemTotal, t.Host.MemAvailable, b.MemoryFloor, t.Pending.Memory, t.Unseen.Memory, need.Memory, b.MemoryBytes},
		{Disk, t.Host.DiskTotal, t.Host.DiskFree, b.DiskFloor, t.Pending.Disk, t.Unseen.Disk, need.Disk, b.DiskBytes},
	} {
		if r.total == 0 {
			continue // not sampled
		}
		floor := r.floor
		if need.Pool {
			// Pools stop while creates still have room on the host too:
			// the budget's share kept for them, at most what the host's
			// own floor is (a tenth of a big disk's budget is tens of
			// GiB, which would stop pools on a host with plenty free).
			floor += min(int64((1-PoolShare)*float64(r.budget)), r.floor)
		}
		avail := r.avail - r.pending - max(r.unseen, 0)
		if avail-r.need < floor {
			return &Refusal{Resource: r.res, Scope: "host", Unit: "MiB", Budget: (r.total - floor) / mib,
				Used: mibUp(r.total - avail), Requested: mibUp(r.need)}
		}
	}
	return nil
}

// PoolNeed is n for a warm-pool refill.
func (n Need) PoolNeed() Need {
	n.Pool = true
	return n
}
