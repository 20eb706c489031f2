package store

import (
	"context"
	"time"
)

// Volume states as stored.
const (
	// VolumeCreating: the record holds the name while the volume's disk is
	// made (or filled from a backup); a restart removes what it left.
	VolumeCreating = "creating"
	VolumeReady    = "ready"
	// VolumeDeleting: a delete was decided; a restart finishes it.
	VolumeDeleting = "deleting"
)

// Volume is the durable record of one volume: a named, size-limited
// filesystem on this node's disk that sandboxes mount.
type Volume struct {
	ID string `json:"id"`
	// Tenant owns the volume (empty: the default tenant).
	Tenant    string    `json:"tenant,omitempty"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	SizeMB    int       `json:"size_mb"`
	CreatedAt time.Time `json:"created_at"`
	// Token opens the volume's content over E2B's volume content API
	// (a bearer token of this volume only). The store file is 0600.
	Token string `json:"token"`
	// RestoredFrom names the backup the volume was made from, if any.
	RestoredFrom string `json:"restored_from,omitempty"`
}

// VolumeMount is one volume mounted into a sandbox. Its record keeps the
// mounts for the sandbox's whole life, paused included: they are the
// sandbox's claim on the volume (one read-write claim at a time).
type VolumeMount struct {
	// VolumeID is the volume's ID; Name its name when the mount was made.
	VolumeID string `json:"volume_id"`
	Name     string `json:"name"`
	// Path is where the sandbox sees it (absolute, clean).
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Holds reports whether the sandbox's mounts hold a claim on volumes: it
// is live or paused (a paused sandbox mounts them again when it resumes).
func (s *Sandbox) Holds() bool {
	return len(s.Volumes) > 0 && (s.Live() || s.State == StatePaused)
}

// Volumes keeps volume records. Names are unique.
type Volumes interface {
	// CreateVolume writes a new record; a taken name is ErrAlreadyExists.
	CreateVolume(ctx context.Context, v *Volume) error
	UpdateVolume(ctx context.Context, v *Volume) error
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// VolumeByName returns the volume named name (ErrNotFound if none).
	VolumeByName(ctx context.Context, name string) (*Volume, error)
	ListVolumes(ctx context.Context) ([]*Volume, error)
	DeleteVolume(ctx context.Context, id string) error
}
