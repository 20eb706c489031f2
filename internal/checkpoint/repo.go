// Package checkpoint stores checkpoints and disk snapshots of sandboxes in a
// blobstore.Store: every file of the image is uploaded encrypted under its
// own data key (package seal), and the manifest is written last. A
// checkpoint is restorable iff its manifest exists and verifies; a crash or
// store failure at any earlier point leaves artifacts without a manifest,
// which Load reports as incomplete and SweepIncomplete removes.
//
// Object layout:
//
//	checkpoints/<id>/manifest.json
//	checkpoints/<id>/data/<artifact name>
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

const (
	// Prefix is where NewRepo keeps checkpoints and snapshots.
	Prefix       = "checkpoints/"
	manifestName = "manifest.json"
	// parallel bounds the artifacts in transfer at once per Save or Load;
	// each S3 transfer has its own part concurrency on top.
	parallel = 4
	// cleanupTimeout bounds the best-effort deletes after a failure, which
	// run even when the caller's context is done.
	cleanupTimeout = 30 * time.Second
)

// ErrIncomplete means artifacts of a checkpoint exist but its manifest does
// not: its upload never finished, and it can never be restored. It comes
// wrapped in errdefs.ErrFailedPrecondition.
var ErrIncomplete = errors.New("checkpoint incomplete")

// errBadManifest marks a stored manifest that does not decode or validate.
var errBadManifest = errors.New("bad manifest")

// Repo is the checkpoint repository. It is safe for concurrent use.
type Repo struct {
	store  blobstore.Store
	keys   *seal.Keyring
	prefix string
	index  Index // nil: list from the store
	log    *slog.Logger

	mu       sync.Mutex
	inflight map[string]int // ids being saved: SweepIncomplete leaves them alone
}

// NewRepo returns a repository storing in store with keys from keys.
func NewRepo(store blobstore.Store, keys *seal.Keyring) *Repo {
	return NewRepoAt(store, keys, Prefix)
}

// NewRepoAt returns a repository under another key prefix ("dir/"): the
// same manifest-last, encrypted storage for other artifact sets.
func NewRepoAt(store blobstore.Store, keys *seal.Keyring, prefix string) *Repo {
	return &Repo{store: store, keys: keys, prefix: prefix, inflight: map[string]int{}, log: slog.New(slog.DiscardHandler)}
}

// WithLogger has r log to log (it logs nothing by default) and answers r.
func (r *Repo) WithLogger(log *slog.Logger) *Repo {
	r.log = log
	return r
}

func (r *Repo) manifestKey(id string) string       { return r.prefix + id + "/" + manifestName }
func (r *Repo) artifactKey(id, name string) string { return r.prefix + id + "/data/" + name }

// Get returns the manifest of checkpoint id without downloading or
// verifying its artifacts (Load does that).
func (r *Repo) Get(ctx context.Context, id string) (*Manifest, error) {
	if err := validName("checkpoint id", id, maxIDLen); err != nil {
		return nil, err
	}
	return r.get(ctx, id)
}

func (r *Repo) get(ctx context.Context, id string) (*Manifest, error) {
	rc, _, err := r.store.Get(ctx, r.manifestKey(id))
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, r.notFound(ctx, id)
	}
	if err != nil {
		return nil, storeErr(err, "read manifest of checkpoint %s", id)
	}
	defer rc.Close()
	b, err := readLimited(rc, maxManifest)
	if err != nil {
		return nil, storeErr(err, "read manifest of checkpoint %s", id)
	}
	m, err := decodeManifest(b)
	if err == nil && m.ID != id {
		err = errdefs.New(errdefs.ErrFailedPrecondition, "the manifest stored for checkpoint %s names checkpoint %s", id, m.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w: %w", id, errBadManifest, err)
	}
	return m, nil
}

// notFound tells a checkpoint that never existed (or was deleted) from one
// whose upload never finished.
func (r *Repo) notFound(ctx context.Context, id string) error {
	infos, err := r.store.List(ctx, r.prefix+id+"/")
	if err != nil {
		return storeErr(err, "look for checkpoint %s", id)
	}
	if len(infos) > 0 {
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, ErrIncomplete,
			"checkpoint %s is incomplete: its upload never finished, so it cannot be restored", id)
	}
	return errdefs.New(errdefs.ErrNotFound, "checkpoint %s not found", id)
}

// List returns the manifests of every complete checkpoint and snapshot,
// sorted by id. Artifacts without a manifest are not listed, nor (with a
// warning in the log) manifests that do not decode: one damaged object
// must not hide the rest.
func (r *Repo) List(ctx context.Context) ([]*Manifest, error) {
	if r.index != nil {
		return r.listIndex(ctx, "")
	}
	return r.listStore(ctx)
}

// ListOf returns the manifests of sandbox id's checkpoints and snapshots,
// as List does: from the index (one sandbox's entries) when there is one.
func (r *Repo) ListOf(ctx context.Context, id string) ([]*Manifest, error) {
	if id == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "no sandbox id")
	}
	if r.index != nil {
		return r.listIndex(ctx, id)
	}
	all, err := r.listStore(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, m := range all {
		if m.SandboxID == id {
			out = append(out, m)
		}
	}
	return out, nil
}

// listStore is List from the object store: a listing, then each manifest.
func (r *Repo) listStore(ctx context.Context) ([]*Manifest, error) {
	infos, err := r.store.List(ctx, r.prefix)
	if err != nil {
		return nil, storeErr(err, "list checkpoints")
	}
	var ids []string
	for _, info := range infos {
		if id, ok := r.manifestID(info.Key); ok {
			ids = append(ids, id)
		}
	}
	ms := make([]*Manifest, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 2*parallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ms[i], errs[i] = r.get(ctx, id)
		})
	}
	wg.Wait()
	out := ms[:0]
	for i, m := range ms {
		switch err := errs[i]; {
		case err == nil:
			out = append(out, m)
		case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, ErrIncomplete):
			// deleted since we listed
		case errors.Is(err, errBadManifest):
			r.log.Warn("checkpoint manifest skipped", "checkpoint", ids[i], "err", err)
		default:
			return nil, err
		}
	}
	return out, nil
}

// manifestID is the id of the checkpoint whose manifest key is key.
func (r *Repo) manifestID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, r.prefix)
	if !ok {
		return "", false
	}
	id, name, ok := strings.Cut(rest, "/")
	return id, ok && name == manifestName
}

// Delete removes checkpoint id: its manifest first, so that a delete cut
// short leaves at worst an incomplete checkpoint, never a restorable one
// with missing artifacts. A missing checkpoint is not an error.
func (r *Repo) Delete(ctx context.Context, id string) error {
	if err := validName("checkpoint id", id, maxIDLen); err != nil {
		return err
	}
	if r.index != nil {
		// Out of the index first: one that outlived its manifest would
		// list a checkpoint that cannot load.
		if err := r.index.DeleteManifest(ctx, r.prefix, id); err != nil {
			return fmt.Errorf("unindex checkpoint %s: %w", id, err)
		}
	}
	r.mu.Lock() // not while Rewrap rewrites this manifest
	err := r.store.Delete(ctx, r.manifestKey(id))
	r.mu.Unlock()
	if err != nil {
		return storeErr(err, "delete manifest of checkpoint %s", id)
	}
	return r.deleteObjects(ctx, id)
}

func (r *Repo) deleteObjects(ctx context.Context, id string) error {
	infos, err := r.store.List(ctx, r.prefix+id+"/")
	if err != nil {
		return storeErr(err, "list artifacts of checkpoint %s", id)
	}
	for _, info := range infos {
		if err := r.store.Delete(ctx, info.Key); err != nil {
			return storeErr(err, "delete artifact of checkpoint %s", id)
		}
	}
	return nil
}

// storeErr adds context to an error of the store or the local disk. The
// class stays reachable with errors.Is and the store's client message (which
// names the store and the reason) stays the public one.
func storeErr(err error, format string, args ...any) error {
	if (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) && errdefs.Class(err) == nil {
		err = errdefs.Wrap(errdefs.ErrNoSpace, err, "out of disk space")
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
