package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// Rewrap re-wraps the data keys of every checkpoint under customer key
// keyID ("" = platform key) whose keys were wrapped by an older version of
// it, and rewrites those manifests (a manifest PUT replaces it atomically).
// Artifacts are not touched. Run it after rotating the key, with old and
// new versions loaded; afterwards the old version is no longer needed. It
// returns how many manifests it rewrote; running it again is harmless.
func (r *Repo) Rewrap(ctx context.Context, keyID string) (int, error) {
	if err := r.keys.Require(keyID); err != nil {
		return 0, fmt.Errorf("rewrap: %w", err)
	}
	all, err := r.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range all {
		if m.KeyID != keyID {
			continue
		}
		done, err := r.rewrapOne(ctx, m.ID)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, nil
}

// rewrapOne re-reads manifest id and rewrites it if any key needs it. The
// repo lock keeps a Delete on this node from running in between.
func (r *Repo) rewrapOne(ctx context.Context, id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := r.get(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, ErrIncomplete) {
		return false, nil // deleted meanwhile
	}
	if err != nil {
		return false, err
	}
	changed := false
	rewrap := func(wk *seal.WrappedKey) error {
		if !r.keys.NeedsRewrap(*wk) {
			return nil
		}
		nwk, err := r.keys.Rewrap(*wk)
		if err != nil {
			return fmt.Errorf("rewrap checkpoint %s: %w", id, err)
		}
		*wk, changed = nwk, true
		return nil
	}
	for i := range m.Artifacts {
		if err := rewrap(&m.Artifacts[i].WrappedKey); err != nil {
			return false, err
		}
	}
	if err := rewrap(&m.Sealed.WrappedKey); err != nil {
		return false, err
	}
	if !changed {
		return false, nil
	}
	b, err := encodeManifest(m)
	if err != nil {
		return false, err
	}
	if _, err := r.store.Put(ctx, r.manifestKey(id), bytes.NewReader(b), int64(len(b))); err != nil {
		return false, storeErr(err, "rewrite manifest of checkpoint %s", id)
	}
	return true, r.indexPut(ctx, id, b)
}

// SweepIncomplete deletes the artifacts of checkpoints that have no
// manifest and whose newest object is older than olderThan: leftovers of
// uploads that failed or whose daemon died. olderThan must exceed the
// longest upload another node sharing the store may still be running
// (Saves in progress on this node are always left alone). It returns how
// many incomplete checkpoints it removed.
func (r *Repo) SweepIncomplete(ctx context.Context, olderThan time.Duration) (int, error) {
	infos, err := r.store.List(ctx, r.prefix)
	if err != nil {
		return 0, storeErr(err, "list checkpoints")
	}
	type group struct {
		manifest bool
		newest   time.Time
	}
	groups := map[string]*group{}
	var ids []string
	for _, info := range infos {
		id, _, ok := strings.Cut(strings.TrimPrefix(info.Key, r.prefix), "/")
		if !ok {
			continue
		}
		g := groups[id]
		if g == nil {
			g = &group{}
			groups[id] = g
			ids = append(ids, id)
		}
		if _, isManifest := r.manifestID(info.Key); isManifest {
			g.manifest = true
		}
		if info.Modified.After(g.newest) {
			g.newest = info.Modified
		}
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	for _, id := range ids {
		g := groups[id]
		r.mu.Lock()
		busy := r.inflight[id] > 0
		r.mu.Unlock()
		if g.manifest || busy || g.newest.After(cutoff) {
			continue
		}
		if err := r.deleteObjects(ctx, id); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
