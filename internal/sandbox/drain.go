package sandbox

import (
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// SetDraining makes this node take no new sandboxes (creates, resumes and
// forks answer 503, its warm pools empty and stay empty) while a cluster
// moves its running ones elsewhere; false undoes it.
func (s *Service) SetDraining(on bool) {
	s.nodeDraining.Store(on)
	s.pools.setDraining(on)
}

// Draining reports whether the node is draining.
func (s *Service) Draining() bool { return s.nodeDraining.Load() }

func (s *Service) refuseIfDraining() error {
	if s.nodeDraining.Load() {
		return errdefs.New(errdefs.ErrUnavailable, "this node is draining: it takes no new sandboxes (retry: another node will)")
	}
	return nil
}

// Movable is a running sandbox a drain moves, and the time it has left.
type Movable struct {
	ID   string
	Left time.Duration
}

// Movable lists the running sandboxes of users (not pool or build
// sandboxes) this node runs.
func (s *Service) Movable() []Movable {
	var out []Movable
	for _, e := range s.live.all() {
		e.mu.Lock()
		if e.rec.State == store.StateRunning && e.build == "" && e.rec.Build == "" {
			out = append(out, Movable{ID: e.rec.ID, Left: max(time.Until(e.rec.ExpiresAt), time.Second)})
		}
		e.mu.Unlock()
	}
	return out
}
