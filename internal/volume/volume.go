// Package volume is persistent, named, size-limited storage that sandboxes
// mount: a volume outlives the sandboxes that use it, lives on the disk of
// the node that made it, and can be backed up to the object store
// (encrypted and manifest-last, through package checkpoint) and restored
// from there on any node. Sandboxes mount a volume's root at a path of
// their choosing, read-write or read-only; its files are also reachable
// without a sandbox through the content methods (E2B's volume content API
// and the native /v1/volumes/{v}/files routes), which resolve every path
// inside the volume's root and never follow a symlink out of it.
//
// Sharing: at most one sandbox holds a volume read-write at a time, next to
// any number holding it read-only. Sandboxes are separate kernels: gVisor
// serves the volume's files to each through its gofer in shared mode, so
// every read and write reaches the host file (each sees the others'
// writes), but file locks (flock, fcntl) live in each sandbox's own
// kernel and do not reach the others. Two writers could corrupt any file
// that relies on locks (SQLite, git, package managers); one writer with
// readers cannot. A sandbox keeps its claim while paused: it mounts the
// volume again when it resumes, and a checkpoint holds none of the
// volume's contents.
package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Config of the service.
type Config struct {
	// Dir holds the volumes' images and mount points (0700).
	Dir string
	// ImagesDir holds backups while they are made or restored.
	ImagesDir string
	// DefaultMB is the size of a volume made without one; MaxMB bounds it.
	DefaultMB, MaxMB int
	// Backups is where backups go; nil turns them off.
	Backups *checkpoint.Repo
	Logger  *slog.Logger
}

// Holders answers the sandbox records that hold a volume (this node's live
// ones and every paused one that mounts one): store.Sandboxes does.
type Holders interface {
	VolumeHolders(ctx context.Context) ([]*store.Sandbox, error)
}

// Service owns the volumes of this node.
type Service struct {
	cfg  Config
	vols store.Volumes
	// sandboxes are read for the claims their records hold.
	sandboxes Holders
	disk      disk
	log       *slog.Logger

	// mu serialises every change of who holds what: creates and deletes of
	// volumes, and sandbox claims (check, then the caller records).
	mu sync.Mutex
	// content: the content methods hold a volume's lock shared, a backup
	// and a delete exclusively.
	contentMu sync.Mutex
	content   map[string]*sync.RWMutex
	// backups: one backup of a volume at a time.
	backups keylock.Map
}

// Volume is what callers see of one volume.
type Volume struct {
	ID   string
	Name string
	// Tenant owns it.
	Tenant    string
	SizeMB    int
	CreatedAt time.Time
	// UsedBytes is what its files take now.
	UsedBytes int64
	// RestoredFrom names the backup it was made from, if any.
	RestoredFrom string
	// Mounts are the sandboxes holding it (running or paused).
	Mounts []Mount
}

// Mount is one sandbox's hold on a volume.
type Mount struct {
	SandboxID string
	Path      string
	ReadOnly  bool
	// State is the sandbox's (running, paused, ...).
	State string
}

// Open starts the service: it finishes what a crash cut off (volumes being
// made are removed, deletes are finished, directories no record owns are
// removed) and mounts every ready volume that is not mounted.
func Open(ctx context.Context, cfg Config, vols store.Volumes, sandboxes Holders) (*Service, error) {
	if cfg.DefaultMB == 0 {
		cfg.DefaultMB = 1024
	}
	if cfg.MaxMB == 0 {
		cfg.MaxMB = 64 << 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	s := &Service{cfg: cfg, vols: vols, sandboxes: sandboxes, disk: disk{dir: cfg.Dir}, log: cfg.Logger, content: map[string]*sync.RWMutex{}}
	recs, err := vols.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	known := map[string]bool{}
	for _, v := range recs {
		known[v.ID] = true
		switch v.State {
		case store.VolumeReady:
			// A backup cut off by a crash left it frozen.
			if mounted(s.disk.mnt(v.ID)) {
				_ = s.disk.thaw(ctx, v.ID)
			}
			if err := s.disk.mount(ctx, v.ID); err != nil {
				s.log.Error("volume could not be mounted", "volume", v.ID, "name", v.Name, "err", err)
			}
		default:
			s.log.Info("removing a volume left unfinished by a restart", "volume", v.ID, "name", v.Name, "state", v.State)
			if err := s.disk.remove(ctx, v.ID); err != nil {
				return nil, fmt.Errorf("remove unfinished volume %s: %w", v.ID, err)
			}
			if err := vols.DeleteVolume(ctx, v.ID); err != nil {
				return nil, err
			}
		}
	}
	ids, err := s.disk.ids()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !known[id] {
			s.log.Info("removing a volume directory no record owns", "volume", id)
			if err := s.disk.remove(ctx, id); err != nil {
				s.log.Warn("remove orphan volume", "volume", id, "err", err)
			}
		}
	}
	return s, nil
}

// CreateRequest asks for a new volume.
type CreateRequest struct {
	Name string
	// SizeMB is its size limit (0: the node's default, or the backup's).
	SizeMB int
	// FromBackup fills it from a backup (its ID) in the object store.
	FromBackup string
}

// Create makes a volume: an empty one, or one filled from a backup.
func (s *Service) Create(ctx context.Context, req CreateRequest) (_ *Volume, err error) {
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	var backup *checkpoint.Manifest
	if req.FromBackup != "" {
		if backup, err = s.backupManifest(ctx, req.FromBackup); err != nil {
			return nil, err
		}
		if req.SizeMB == 0 {
			req.SizeMB = backupSize(backup)
		}
	}
	if req.SizeMB == 0 {
		req.SizeMB = s.cfg.DefaultMB
	}
	if req.SizeMB < 16 || req.SizeMB > s.cfg.MaxMB {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "size_mb must be between 16 and %d", s.cfg.MaxMB)
	}
	ctx = context.WithoutCancel(ctx) // a client hanging up must not leave it half-made
	rec := &store.Volume{
		ID: newID(), Tenant: tenant.FromContext(ctx).Tenant, Name: req.Name, State: store.VolumeCreating, SizeMB: req.SizeMB,
		CreatedAt: time.Now().UTC(), Token: newToken(),
	}
	if backup != nil {
		rec.RestoredFrom = backup.ID
	}
	s.mu.Lock()
	err = s.vols.CreateVolume(ctx, rec)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	log := s.log.With("volume", rec.ID, "name", rec.Name)
	defer func() {
		if err != nil {
			if rerr := s.disk.remove(ctx, rec.ID); rerr != nil {
				log.Warn("remove failed volume", "err", rerr)
			}
			if derr := s.vols.DeleteVolume(ctx, rec.ID); derr != nil {
				log.Warn("delete record of failed volume", "err", derr)
			}
		}
	}()
	if err := s.disk.make(ctx, rec.ID, rec.SizeMB); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not make the volume's filesystem")
	}
	if backup != nil {
		if err := s.restoreBackup(ctx, backup, rec); err != nil {
			return nil, err
		}
	}
	rec.State = store.VolumeReady
	if err := s.vols.UpdateVolume(ctx, rec); err != nil {
		return nil, fmt.Errorf("record volume: %w", err)
	}
	log.Info("volume created", "size_mb", rec.SizeMB, "from_backup", rec.RestoredFrom)
	return s.view(ctx, rec, nil)
}

// lookup finds a ready volume by ID or name.
func (s *Service) lookup(ctx context.Context, ref string) (*store.Volume, error) {
	v, err := s.vols.GetVolume(ctx, ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		v, err = s.vols.VolumeByName(ctx, ref)
	}
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, errdefs.New(errdefs.ErrNotFound, "volume %q not found", ref)
		}
		return nil, err
	}
	// Another tenant's volume answers as an unknown one.
	if v.State != store.VolumeReady || !tenant.FromContext(ctx).Owns(v.Tenant) {
		return nil, errdefs.New(errdefs.ErrNotFound, "volume %q not found", ref)
	}
	return v, nil
}

// Get returns a volume by ID or name.
func (s *Service) Get(ctx context.Context, ref string) (*Volume, error) {
	v, err := s.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	holders, err := s.holders(ctx)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, v, holders[v.ID])
}

// Token returns the content token of a volume by ID (E2B's volume API).
func (s *Service) Token(ctx context.Context, id string) (string, error) {
	v, err := s.lookup(ctx, id)
	if err != nil {
		return "", err
	}
	return v.Token, nil
}

// List returns every ready volume of the caller's tenant (every tenant's
// for the admin), by name.
func (s *Service) List(ctx context.Context) ([]*Volume, error) {
	recs, err := s.vols.ListVolumes(ctx)
	if err != nil {
		return nil, err
	}
	holders, err := s.holders(ctx)
	if err != nil {
		return nil, err
	}
	p := tenant.FromContext(ctx)
	var out []*Volume
	for _, v := range recs {
		if v.State == store.VolumeReady && p.Owns(v.Tenant) {
			vv, err := s.view(ctx, v, holders[v.ID])
			if err != nil {
				return nil, err
			}
			out = append(out, vv)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Service) view(_ context.Context, v *store.Volume, mounts []Mount) (*Volume, error) {
	used, _, err := s.disk.usage(v.ID)
	if err != nil {
		s.log.Warn("volume usage", "volume", v.ID, "err", err)
	}
	return &Volume{ID: v.ID, Name: v.Name, Tenant: tenant.Of(v.Tenant), SizeMB: v.SizeMB, CreatedAt: v.CreatedAt, UsedBytes: used, RestoredFrom: v.RestoredFrom, Mounts: mounts}, nil
}

// holders maps volume IDs to the sandboxes holding them: every sandbox
// record that is live or paused, by its mounts.
func (s *Service) holders(ctx context.Context) (map[string][]Mount, error) {
	recs, err := s.sandboxes.VolumeHolders(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := map[string][]Mount{}
	for _, r := range recs {
		for _, m := range r.Volumes {
			out[m.VolumeID] = append(out[m.VolumeID], Mount{SandboxID: r.ID, Path: m.Path, ReadOnly: m.ReadOnly, State: r.State})
		}
	}
	for _, ms := range out {
		sort.Slice(ms, func(i, j int) bool { return ms[i].SandboxID < ms[j].SandboxID })
	}
	return out, nil
}

// Delete removes a volume and its files. A volume some sandbox holds
// (running or paused) is not deleted: FailedPrecondition, naming it.
func (s *Service) Delete(ctx context.Context, ref string) error {
	ctx = context.WithoutCancel(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(ctx, ref)
	if err != nil {
		return err
	}
	holders, err := s.holders(ctx)
	if err != nil {
		return err
	}
	if hs := holders[v.ID]; len(hs) > 0 {
		return errdefs.New(errdefs.ErrFailedPrecondition, "volume %q is mounted by sandbox %s (%s): kill it first (a paused sandbox holds its volumes too)", v.Name, hs[0].SandboxID, hs[0].State)
	}
	unlock := s.lockContent(v.ID, true)
	defer unlock()
	v.State = store.VolumeDeleting
	if err := s.vols.UpdateVolume(ctx, v); err != nil {
		return err
	}
	if err := s.disk.remove(ctx, v.ID); err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "could not remove the volume's filesystem (a restart finishes the delete)")
	}
	if err := s.vols.DeleteVolume(ctx, v.ID); err != nil {
		return err
	}
	s.log.Info("volume deleted", "volume", v.ID, "name", v.Name)
	return nil
}

// Claim resolves a sandbox's mounts by volume name and checks them against
// every other sandbox's: a volume is held read-write by one sandbox at a
// time (see the package doc). It returns the mounts with their volume IDs,
// and holds the claim lock until release: the caller writes the sandbox's
// record (which holds the claim from then on) and then releases. Records
// of sandbox id itself are not counted (its resume).
func (s *Service) Claim(ctx context.Context, id string, mounts []store.VolumeMount) (_ []store.VolumeMount, release func(), err error) {
	paths := make([]string, len(mounts))
	for i, m := range mounts {
		paths[i] = m.Path
	}
	if err := CheckMountPaths(paths); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer func() {
		if err != nil {
			s.mu.Unlock()
		}
	}()
	holders, err := s.holders(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make([]store.VolumeMount, len(mounts))
	seen := map[string]bool{}
	for i, m := range mounts {
		v, err := s.lookup(ctx, m.Name)
		if err != nil {
			return nil, nil, err
		}
		if seen[v.ID] {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "volume %q is mounted twice: mount a volume once per sandbox", v.Name)
		}
		seen[v.ID] = true
		if !m.ReadOnly {
			for _, h := range holders[v.ID] {
				if h.SandboxID != id && !h.ReadOnly {
					return nil, nil, errdefs.New(errdefs.ErrFailedPrecondition,
						"volume %q is mounted read-write by sandbox %s (%s): one sandbox at a time may write to a volume (file locks do not reach across sandboxes); mount it read-only, or kill that sandbox first", v.Name, h.SandboxID, h.State)
				}
			}
		}
		out[i] = store.VolumeMount{VolumeID: v.ID, Name: v.Name, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	return out, s.mu.Unlock, nil
}

// Source is the host directory a sandbox mounts for volume id. It never
// leaves spaced (no API answer or error names it).
func (s *Service) Source(ctx context.Context, id string) (string, error) {
	v, err := s.vols.GetVolume(ctx, id)
	if err != nil || v.State != store.VolumeReady {
		return "", errdefs.New(errdefs.ErrNotFound, "volume %s not found on this node", id)
	}
	root := s.disk.root(id)
	if !mounted(s.disk.mnt(id)) {
		if err := s.disk.mount(ctx, id); err != nil {
			return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "volume %q could not be mounted", v.Name)
		}
	}
	return root, nil
}

// lockContent takes volume id's content lock, shared or exclusive.
func (s *Service) lockContent(id string, exclusive bool) func() {
	s.contentMu.Lock()
	l := s.content[id]
	if l == nil {
		l = &sync.RWMutex{}
		s.content[id] = l
	}
	s.contentMu.Unlock()
	if exclusive {
		l.Lock()
		return l.Unlock
	}
	l.RLock()
	return l.RUnlock
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID is "vol-" and 16 random lower-case alphanumerics.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return "vol-" + string(b)
}

func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "vt_" + hex.EncodeToString(b)
}

// CheckMounts checks a sandbox's mount paths (see CheckMountPaths).
func (s *Service) CheckMounts(mounts []store.VolumeMount) error {
	paths := make([]string, len(mounts))
	for i, m := range mounts {
		if err := CheckName(m.Name); err != nil {
			return err
		}
		paths[i] = m.Path
	}
	return CheckMountPaths(paths)
}
