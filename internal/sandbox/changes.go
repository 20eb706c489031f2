package sandbox

import (
	"context"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Change is one sandbox as a change left it, as callers see sandboxes
// (pool and build sandboxes are never in it). Seq only goes up.
type Change struct {
	Seq     uint64
	Sandbox *Sandbox
	// Removed: the record is gone (a failed create's, or an ended
	// sandbox's kept past its time).
	Removed bool
}

// Feed is the feed of sandboxes' state changes, as callers see sandboxes:
// the store's own log of its writes (store.Watched), on the store alone.
type Feed struct {
	store store.Sandboxes
}

// NewFeed follows the sandbox changes written to st; a store that keeps
// none (not a store.Watched) says so at every call.
func NewFeed(st store.Sandboxes) *Feed { return &Feed{store: st} }

// changeFeed is what the store must offer for Changes: store.Watched does.
type changeFeed interface {
	LastSandboxChange() uint64
	SandboxChangesAfter(ctx context.Context, seq uint64) ([]store.SandboxChange, bool, error)
}

// ChangesNow is the Seq to follow changes from: everything up to it is in
// what List returns from now on.
func (f *Feed) ChangesNow() (uint64, error) {
	feed, ok := f.store.(changeFeed)
	if !ok {
		return 0, errdefs.New(errdefs.ErrUnavailable, "this node does not publish sandbox changes")
	}
	return feed.LastSandboxChange(), nil
}

// Changes returns the sandbox changes after seq, waiting until there is
// one or ctx ends. reset reports that changes after seq were not kept:
// the caller lists the sandboxes again and follows from ChangesNow, read
// first. Changes of sandboxes callers never see are left out, so the
// result may be empty with Seq moved: next is where to follow from.
func (f *Feed) Changes(ctx context.Context, seq uint64) (changes []Change, next uint64, reset bool, err error) {
	feed, ok := f.store.(changeFeed)
	if !ok {
		return nil, seq, false, errdefs.New(errdefs.ErrUnavailable, "this node does not publish sandbox changes")
	}
	raw, reset, err := feed.SandboxChangesAfter(ctx, seq)
	if err != nil || reset {
		return nil, seq, reset, err
	}
	next = seq
	for _, c := range raw {
		next = c.Seq
		rec := c.Sandbox
		if rec.State == store.StatePooled || rec.Build != "" {
			continue
		}
		changes = append(changes, Change{Seq: c.Seq, Sandbox: fromRecord(rec), Removed: c.Deleted})
	}
	return changes, next, false, nil
}
