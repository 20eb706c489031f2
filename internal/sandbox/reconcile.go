package sandbox

import (
	"context"
	"errors"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Reconcile ends, on this node only, every sandbox it runs whose record no
// longer says this node runs it: in a cluster, the others reported it lost
// while this node's lease had lapsed, and the catalog refuses this node's
// writes to it from then on. Its processes end and its host resources go;
// the record stays as the cluster wrote it. Ready pool sandboxes are
// checked the same way. It answers how many it ended.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	// still reports whether rec (as this node last wrote it) is still
	// this node's in the catalog.
	still := func(rec *store.Sandbox) (bool, error) {
		cur, err := s.store.GetSandbox(ctx, rec.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return cur.Live() && cur.Node == rec.Node, nil
	}
	live := s.live.byID()
	n := 0
	for id, e := range live {
		e.mu.Lock()
		ok, err := still(e.rec)
		if err != nil || ok || !e.rec.Live() {
			e.mu.Unlock()
			if err != nil {
				return n, err
			}
			continue
		}
		s.log.Warn("sandbox given up by the cluster: ending it here", "sandbox", id)
		if err := s.booter.teardown(context.WithoutCancel(ctx), id, e.ep); err != nil {
			s.log.Error("tear down a sandbox the cluster gave up", "sandbox", id, "err", err)
		}
		s.live.drop(id)
		e.agent.Close()
		s.metrics.ended(store.StateLost, "given up by the cluster")
		e.mu.Unlock()
		n++
	}
	for _, p := range s.pools.byTemplate {
		var checkErr error
		n += p.prune(func(b *booted) bool {
			ok, err := still(b.rec)
			if err != nil {
				checkErr = err
				return true
			}
			return ok
		})
		if checkErr != nil {
			return n, checkErr
		}
	}
	if n > 0 {
		go s.egressChanged()
	}
	return n, nil
}
