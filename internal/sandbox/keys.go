package sandbox

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/tenant"
)

// CustomerKeys are the keys customers bring (BYOK) to seal their
// sandboxes' checkpoints and snapshots. A customer key is held in memory
// only: supplied through the API or read from the operator's key file at
// start, never written by spaced. Checkpoints and snapshots of sandboxes
// created with key_id are encrypted under it; without it loaded they cannot
// be restored.
type CustomerKeys struct {
	ring *seal.Keyring
	repo *checkpoint.Repo // whose manifests a rotation re-wraps
	log  *slog.Logger
}

// NewCustomerKeys manages the customer keys of ring, which seal the
// artifacts of repo, logging to log. Either nil: this node has no object store, and every
// call says so.
func NewCustomerKeys(ring *seal.Keyring, repo *checkpoint.Repo, log *slog.Logger) *CustomerKeys {
	return &CustomerKeys{ring: ring, repo: repo, log: log}
}

func (k *CustomerKeys) usable() error {
	if k.ring == nil || k.repo == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this node has no object store for checkpoints, so no encryption keys")
	}
	return nil
}

// SetKey loads customer key id (32 raw bytes), replacing a loaded one.
func (k *CustomerKeys) SetKey(id string, key []byte) error {
	if err := k.usable(); err != nil {
		return err
	}
	if err := k.ring.SetCustomerKey(id, key); err != nil {
		return err
	}
	k.log.Info("customer key loaded", "key_id", id)
	return nil
}

// RotateKey replaces customer key id by newKey and re-wraps the data keys
// of every checkpoint and snapshot under it (the artifacts themselves are
// not re-encrypted). It returns how many manifests were rewritten.
func (k *CustomerKeys) RotateKey(ctx context.Context, id string, newKey []byte) (int, error) {
	if err := k.usable(); err != nil {
		return 0, err
	}
	if !k.ring.HasKey(id) {
		return 0, errdefs.New(errdefs.ErrFailedPrecondition, "encryption key %q is not loaded: rotation needs the current key (PUT /v1/keys/%s)", tenant.Bare(id), tenant.Bare(id))
	}
	if err := k.ring.RotateCustomerKey(id, newKey); err != nil {
		return 0, err
	}
	n, err := k.repo.Rewrap(ctx, id)
	if err != nil {
		// The old version stays loaded as a previous one: nothing is
		// unreadable, and a retry finishes the job.
		return n, fmt.Errorf("re-wrap data keys under the new %s: %w", id, err)
	}
	// Every data key is wrapped by the new version: drop the old one.
	if err := k.ring.SetCustomerKey(id, newKey); err != nil {
		return n, err
	}
	k.log.Info("customer key rotated", "key_id", id, "manifests", n)
	return n, nil
}

// RemoveKey forgets customer key id: what is encrypted under it cannot be
// restored until it is supplied again.
func (k *CustomerKeys) RemoveKey(id string) error {
	if err := k.usable(); err != nil {
		return err
	}
	if id == "" || !k.ring.HasKey(id) {
		return errdefs.New(errdefs.ErrNotFound, "encryption key %q is not loaded", tenant.Bare(id))
	}
	k.ring.RemoveCustomerKey(id)
	k.log.Info("customer key removed", "key_id", id)
	return nil
}

// KeyIDs returns the ids of the customer keys loaded on this node (never
// the keys).
func (k *CustomerKeys) KeyIDs() ([]string, error) {
	if err := k.usable(); err != nil {
		return nil, err
	}
	return k.ring.CustomerKeyIDs(), nil
}
