package store

import (
	"context"
	"sync"
	"time"
)

// SandboxChange is one sandbox record as a write left it. Seq only goes up
// (across restarts too: it starts from the clock in microseconds), so it
// can be an SSE event id.
type SandboxChange struct {
	Seq uint64
	// Sandbox is the record as written (for a deletion, as it was just
	// before). Readers must not change it.
	Sandbox *Sandbox
	Deleted bool
}

// watchRing is how many changes a Watched keeps for readers that come back
// after missing some (an SSE client reconnecting with Last-Event-ID).
const watchRing = 4096

// Watched is a Catalog that also keeps the latest sandbox record changes
// written through it, for readers that follow them (the console's live
// list). Every write of a sandbox record goes through it, so no change is
// missed, whichever code path made it. Everything else is the wrapped
// Catalog's.
type Watched struct {
	Catalog

	mu      sync.Mutex
	seq     uint64
	ring    []SandboxChange // oldest first, at most watchRing
	changed chan struct{}   // closed and replaced at each change
}

// Watch wraps st.
func Watch(st Catalog) *Watched {
	return &Watched{Catalog: st, seq: uint64(time.Now().UnixMicro()), changed: make(chan struct{})}
}

func (w *Watched) publish(rec *Sandbox, deleted bool) {
	cp := *rec
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	if len(w.ring) == watchRing {
		copy(w.ring, w.ring[1:])
		w.ring = w.ring[:watchRing-1]
	}
	w.ring = append(w.ring, SandboxChange{Seq: w.seq, Sandbox: &cp, Deleted: deleted})
	close(w.changed)
	w.changed = make(chan struct{})
}

// CreateSandbox is the Catalog's, published.
func (w *Watched) CreateSandbox(ctx context.Context, s *Sandbox, maxSlots int, avoid func(slot int) bool) error {
	if err := w.Catalog.CreateSandbox(ctx, s, maxSlots, avoid); err != nil {
		return err
	}
	w.publish(s, false)
	return nil
}

// UpdateSandbox is the Catalog's, published.
func (w *Watched) UpdateSandbox(ctx context.Context, s *Sandbox, from Expect) error {
	if err := w.Catalog.UpdateSandbox(ctx, s, from); err != nil {
		return err
	}
	w.publish(s, false)
	return nil
}

// ReviveSandbox is the Catalog's, published.
func (w *Watched) ReviveSandbox(ctx context.Context, s *Sandbox, from Expect, maxSlots int, avoid func(slot int) bool) error {
	if err := w.Catalog.ReviveSandbox(ctx, s, from, maxSlots, avoid); err != nil {
		return err
	}
	w.publish(s, false)
	return nil
}

// DeleteSandbox is the Catalog's, published with the record it removed.
func (w *Watched) DeleteSandbox(ctx context.Context, id string, from Expect) error {
	last, _ := w.Catalog.GetSandbox(ctx, id)
	if err := w.Catalog.DeleteSandbox(ctx, id, from); err != nil {
		return err
	}
	if last == nil {
		last = &Sandbox{ID: id}
	}
	w.publish(last, true)
	return nil
}

// LastSandboxChange is the Seq of the latest change (changes after it are
// new).
func (w *Watched) LastSandboxChange() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// SandboxChangesAfter returns the changes after seq, waiting for one when
// there is none yet, until ctx ends (then it returns ctx's error). gap
// reports that changes after seq are no longer kept, or that seq is not
// one of this Watched's (as after a restart): the reader must read the
// records again, and follow the changes after LastSandboxChange, read
// before it does.
func (w *Watched) SandboxChangesAfter(ctx context.Context, seq uint64) (changes []SandboxChange, gap bool, err error) {
	for {
		w.mu.Lock()
		oldest := w.seq + 1
		if len(w.ring) > 0 {
			oldest = w.ring[0].Seq
		}
		if seq+1 < oldest || seq > w.seq {
			w.mu.Unlock()
			return nil, true, nil
		}
		if seq < w.seq {
			i := len(w.ring) - int(w.seq-seq)
			changes = append(changes, w.ring[i:]...)
			w.mu.Unlock()
			return changes, false, nil
		}
		wait := w.changed
		w.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}
