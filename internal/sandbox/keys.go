package sandbox

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// Customer keys (bring your own key). A customer key is held in memory
// only: supplied through the API or read from the operator's key file at
// start, never written by spaced. Checkpoints and snapshots of sandboxes
// created with key_id are encrypted under it; without it loaded they cannot
// be restored.

func (s *Service) keys() error {
	if s.cfg.Keys == nil || s.cfg.Checkpoints == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this node has no object store for checkpoints, so no encryption keys")
	}
	return nil
}

// SetKey loads customer key id (32 raw bytes), replacing a loaded one.
func (s *Service) SetKey(id string, key []byte) error {
	if err := s.keys(); err != nil {
		return err
	}
	if err := s.cfg.Keys.SetCustomerKey(id, key); err != nil {
		return err
	}
	slog.Info("customer key loaded", "key_id", id)
	return nil
}

// RotateKey replaces customer key id by newKey and re-wraps the data keys
// of every checkpoint and snapshot under it (the artifacts themselves are
// not re-encrypted). It returns how many manifests were rewritten.
func (s *Service) RotateKey(ctx context.Context, id string, newKey []byte) (int, error) {
	if err := s.keys(); err != nil {
		return 0, err
	}
	if !s.cfg.Keys.HasKey(id) {
		return 0, errdefs.New(errdefs.ErrFailedPrecondition, "encryption key %q is not loaded: rotation needs the current key (PUT /v1/keys/%s)", tenant.Bare(id), tenant.Bare(id))
	}
	if err := s.cfg.Keys.RotateCustomerKey(id, newKey); err != nil {
		return 0, err
	}
	n, err := s.cfg.Checkpoints.Rewrap(ctx, id)
	if err != nil {
		// The old version stays loaded as a previous one: nothing is
		// unreadable, and a retry finishes the job.
		return n, fmt.Errorf("re-wrap data keys under the new %s: %w", id, err)
	}
	// Every data key is wrapped by the new version: drop the old one.
	if err := s.cfg.Keys.SetCustomerKey(id, newKey); err != nil {
		return n, err
	}
	slog.Info("customer key rotated", "key_id", id, "manifests", n)
	return n, nil
}

// RemoveKey forgets customer key id: what is encrypted under it cannot be
// restored until it is supplied again.
func (s *Service) RemoveKey(id string) error {
	if err := s.keys(); err != nil {
		return err
	}
	if id == "" || !s.cfg.Keys.HasKey(id) {
		return errdefs.New(errdefs.ErrNotFound, "encryption key %q is not loaded", tenant.Bare(id))
	}
	s.cfg.Keys.RemoveCustomerKey(id)
	slog.Info("customer key removed", "key_id", id)
	return nil
}
