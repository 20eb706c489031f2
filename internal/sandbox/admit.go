package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

// Admission control: every start of a sandbox on this node (a create that
// boots, a pool refill, a resume, a fork, a create from a snapshot, a
// template build's sandbox) is admitted against the node's budgets before
// anything of it is made, and holds a reservation until it is measured.
// Claiming a pooled sandbox starts nothing, so it is never refused.

// AdmissionConfig is the node's budgets.
type AdmissionConfig struct {
	Budget admission.Budget
	// DiskPath is where the host's free disk is read (the data dir); ""
	// leaves the host out.
	DiskPath string
}

// newAdmission returns the service's controller, or nil (everything
// admitted) for a runtime that cannot measure its sandboxes.
func (s *Service) newAdmission(cfg *AdmissionConfig) *admission.Controller {
	ur, ok := s.rt.(runtime.UsageReader)
	if cfg == nil || !ok {
		return nil
	}
	var host func() (admission.Host, error)
	if cfg.DiskPath != "" {
		host = func() (admission.Host, error) { return admission.ReadHost(cfg.DiskPath) }
	}
	return admission.New(admission.Config{
		Logger:  s.log,
		Budget:  cfg.Budget,
		Sampler: newUsageSampler(s.rt, ur, s.frozenSince),
		Host:    host,
		Count:   s.held,
	})
}

// Admission is the node's admission controller (nil when off), for its
// metrics.
func (s *Service) Admission() *admission.Controller { return s.adm }

// held is how many sandboxes the node holds: live ones (template builds'
// included) and pooled ones. Starts in flight count by their reservations.
func (s *Service) held() int {
	n := s.live.count()
	// A hibernated sandbox holds no place: its wake asks for one.
	return n - int(s.hibernatedNow.Load()) + s.pools.size()
}

// usageSampler measures the node's sandboxes for admission, every second.
// A frozen sandbox does not change: its processes do not run, so its
// memory and writable layer stay as they were (or shrink, if the kernel
// reclaims its page cache: the reading then errs on the safe side). Its
// first reading while frozen stands for the rest of that rest instead of
// reading its cgroups and disk again every second, which was half of what
// a frozen sandbox still cost spaced.
type usageSampler struct {
	rt sandboxLister
	ur runtime.UsageReader
	// frozenSince reports when sandbox id was frozen, if it is now.
	frozenSince func(id string) (time.Time, bool)

	mu sync.Mutex
	// frozen holds a reading of each sandbox taken while it was frozen,
	// with when that rest began.
	frozen map[string]frozenReading
}

type frozenReading struct {
	since time.Time
	usage admission.Usage
}

// sandboxLister lists the runtime's sandboxes (runtime.Runtime's List).
type sandboxLister interface {
	List(ctx context.Context) ([]string, error)
}

func newUsageSampler(rt sandboxLister, ur runtime.UsageReader, frozenSince func(string) (time.Time, bool)) *usageSampler {
	return &usageSampler{rt: rt, ur: ur, frozenSince: frozenSince, frozen: map[string]frozenReading{}}
}

func (u *usageSampler) All(ctx context.Context) (map[string]admission.Usage, error) {
	ids, err := u.rt.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]admission.Usage, len(ids))
	for _, id := range ids {
		if v, err := u.One(ctx, id); err == nil {
			out[id] = v
		}
	}
	u.mu.Lock()
	for id := range u.frozen {
		if _, ok := out[id]; !ok {
			delete(u.frozen, id)
		}
	}
	u.mu.Unlock()
	return out, nil
}

func (u *usageSampler) One(ctx context.Context, id string) (admission.Usage, error) {
	since, frozen := u.frozenSince(id)
	if frozen {
		u.mu.Lock()
		r, ok := u.frozen[id]
		u.mu.Unlock()
		if ok && r.since.Equal(since) {
			return r.usage, nil
		}
	}
	v, err := u.ur.Usage(ctx, id)
	if errdefs.Class(err) == errdefs.ErrNotFound {
		// Half made, or gone: it holds nothing.
		return admission.Usage{}, nil
	}
	if err != nil {
		return admission.Usage{}, err
	}
	got := admission.Usage{Memory: int64(v.Memory), Disk: int64(v.Disk + v.Files)}
	if frozen {
		// Frozen before the reading began: the reading is of this rest (a
		// thaw meanwhile and a later freeze make a new one, since another
		// time).
		u.mu.Lock()
		u.frozen[id] = frozenReading{since: since, usage: got}
		u.mu.Unlock()
	}
	return got, nil
}

// frozenSince reports when running sandbox id was frozen at rest, if it
// is frozen now.
func (s *Service) frozenSince(id string) (time.Time, bool) {
	e, ok := s.live.get(id)
	if !ok {
		return time.Time{}, false
	}
	if r := e.rest(); r != nil {
		return r.frozenSince()
	}
	return time.Time{}, false
}

// releaseOne tears down one idle pool sandbox, from the pool with the
// most ready, to make room for a start; false when no pool has one.
func (ps *Pools) releaseOne(ctx context.Context, ref *admission.Refusal) bool {
	var from *pool
	most := 0
	for _, p := range ps.byTemplate {
		if n := p.size(); n > most {
			from, most = p, n
		}
	}
	if from == nil {
		return false
	}
	b := from.release()
	if b == nil {
		return false
	}
	// The room is the caller's: the pool does not take it back at once.
	from.holdRefills(poolHold)
	ps.svc.log.Info("pool sandbox given up to make room", "sandbox", b.rec.ID, "template", from.cfg.Template, "resource", ref.Resource)
	b.undo() // forgets it in the controller once it is gone
	ps.svc.metrics.poolReleased(from.cfg.Template)
	return true
}

// poolHold is how long a pool that gave up a sandbox for a start waits
// before it refills again (within its share of the budgets).
const poolHold = 5 * time.Second

// imageBytes is what the files of an image directory hold.
func imageBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
