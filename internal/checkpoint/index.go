package checkpoint

import (
	"context"
	"fmt"
	"time"
)

// Index keeps a copy of every complete manifest outside the object store
// (cluster mode: the catalog in PostgreSQL), so that listing checkpoints,
// snapshots, layers or backups reads one table instead of listing the
// object store and fetching each manifest. The object store stays the
// truth: a manifest is written there first and indexed after, and
// Reindex brings the index back to it.
type Index interface {
	PutManifest(ctx context.Context, prefix, id string, manifest []byte) error
	DeleteManifest(ctx context.Context, prefix, id string) error
	// Manifests answers every manifest under prefix.
	Manifests(ctx context.Context, prefix string) ([][]byte, error)
	// ManifestsOf answers the manifests under prefix whose sandbox_id is
	// sandbox.
	ManifestsOf(ctx context.Context, prefix, sandbox string) ([][]byte, error)
	// KeepManifests deletes, under prefix, the entries not in ids that
	// were indexed before since (younger ones were written meanwhile).
	KeepManifests(ctx context.Context, prefix string, ids []string, since time.Time) error
}

// Prefix is the repository's key prefix in the object store.
func (r *Repo) Prefix() string { return r.prefix }

// WithIndex makes r keep its manifests in ix too, and list from it.
func (r *Repo) WithIndex(ix Index) *Repo {
	r.index = ix
	return r
}

func (r *Repo) indexPut(ctx context.Context, id string, manifest []byte) error {
	if r.index == nil {
		return nil
	}
	if err := r.index.PutManifest(ctx, r.prefix, id, manifest); err != nil {
		return fmt.Errorf("index checkpoint %s: %w", id, err)
	}
	return nil
}

// listIndex is List (or, for a sandbox id, ListOf) from the index.
func (r *Repo) listIndex(ctx context.Context, sandbox string) ([]*Manifest, error) {
	var docs [][]byte
	var err error
	if sandbox == "" {
		docs, err = r.index.Manifests(ctx, r.prefix)
	} else {
		docs, err = r.index.ManifestsOf(ctx, r.prefix, sandbox)
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	out := make([]*Manifest, 0, len(docs))
	for _, d := range docs {
		m, err := decodeManifest(d)
		if err != nil {
			r.log.Warn("indexed checkpoint manifest skipped", "prefix", r.prefix, "err", err)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// Reindex puts every complete manifest of the object store into the
// index and drops the entries whose manifest is gone (but not those
// indexed while it ran: another node's saves). It answers how many
// manifests the index holds.
func (r *Repo) Reindex(ctx context.Context) (int, error) {
	if r.index == nil {
		return 0, nil
	}
	start := time.Now()
	ms, err := r.listStore(ctx)
	if err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		b, err := encodeManifest(m)
		if err != nil {
			return 0, err
		}
		if err := r.indexPut(ctx, m.ID, b); err != nil {
			return 0, err
		}
		ids = append(ids, m.ID)
	}
	// A minute's margin for the clocks of this node and the index.
	if err := r.index.KeepManifests(ctx, r.prefix, ids, start.Add(-time.Minute)); err != nil {
		return 0, fmt.Errorf("reindex checkpoints: %w", err)
	}
	return len(ids), nil
}
