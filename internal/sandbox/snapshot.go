package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Disk snapshots copy a running sandbox's writable layer to object storage.
// runsc stops the sandbox's processes only for the instant the layer is
// copied (fscheckpoint --leave-running), so a snapshot is point-in-time and
// crash-consistent: it holds every write that completed before that
// instant and none after, as after a power cut; data a process holds in
// its own buffers and has not written is not in it. A new sandbox can start
// from a snapshot; its processes start fresh.

// Snapshot describes a stored disk snapshot.
type Snapshot struct {
	ID        string
	SandboxID string
	Template  string
	CreatedAt time.Time
	Bytes     int64
	Took      time.Duration
	KeyID     string
}

func snapshotFrom(m *checkpoint.Manifest) *Snapshot {
	return &Snapshot{ID: m.ID, SandboxID: m.SandboxID, Template: m.Template, CreatedAt: m.CreatedAt, Bytes: m.Bytes, Took: m.Took, KeyID: m.KeyID}
}

const kindSnapshot = "snapshot"

// TakeSnapshot snapshots the disk of running sandbox id.
func (s *Service) TakeSnapshot(ctx context.Context, id string) (_ *Snapshot, err error) {
	cp, err := s.checkpointer()
	if err != nil {
		return nil, err
	}
	e, ok := s.entry(id)
	if !ok {
		return nil, s.notRunning(id)
	}
	ctx = context.WithoutCancel(ctx)
	defer func() {
		if err != nil {
			s.metrics.checkpointFailed("snapshot")
		}
	}()
	start := time.Now()
	snapID := newArtifactID(id, "s")
	dir, err := s.imageDir(snapID)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The entry lock only for the copy: a kill or pause waits for runsc,
	// not for the upload.
	e.mu.Lock()
	rec := *e.rec
	if rec.State == store.StateRunning {
		err = cp.SnapshotDisk(ctx, id, dir)
	} else {
		err = errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	tImage := time.Now()
	m, err := s.saveCheckpoint(ctx, &rec, snapID, kindSnapshot, dir)
	if err != nil {
		return nil, err
	}
	s.metrics.checkpointed("snapshot", m.Bytes, tImage.Sub(start), time.Since(tImage))
	slog.Info("disk snapshot taken", "sandbox", id, "snapshot", m.ID, "bytes", m.Bytes, "took_ms", time.Since(start).Milliseconds())
	return snapshotFrom(m), nil
}

// Snapshots lists the disk snapshots of sandbox id (all of them if id is
// empty), newest first.
func (s *Service) Snapshots(ctx context.Context, id string) ([]*Snapshot, error) {
	if s.cfg.Checkpoints == nil {
		return nil, nil
	}
	all, err := s.cfg.Checkpoints.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for _, m := range all {
		if m.Kind == kindSnapshot && (id == "" || m.SandboxID == id) {
			out = append(out, snapshotFrom(m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// GetSnapshot returns one disk snapshot.
func (s *Service) GetSnapshot(ctx context.Context, snapID string) (*Snapshot, error) {
	m, err := s.snapshotManifest(ctx, snapID)
	if err != nil {
		return nil, err
	}
	return snapshotFrom(m), nil
}

func (s *Service) snapshotManifest(ctx context.Context, snapID string) (*checkpoint.Manifest, error) {
	if _, err := s.checkpointer(); err != nil {
		return nil, err
	}
	m, err := s.cfg.Checkpoints.Get(ctx, snapID)
	if err != nil {
		return nil, err
	}
	if m.Kind != kindSnapshot {
		return nil, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", snapID)
	}
	return m, nil
}

// DeleteSnapshot deletes one disk snapshot.
func (s *Service) DeleteSnapshot(ctx context.Context, snapID string) error {
	if _, err := s.snapshotManifest(ctx, snapID); err != nil {
		return err
	}
	return s.cfg.Checkpoints.Delete(ctx, snapID)
}

// loadSnapshot fetches snapshot snapID into a local directory for a
// create, and names the template image it was taken on; the caller removes
// the directory.
func (s *Service) loadSnapshot(ctx context.Context, snapID string, req *CreateRequest) (dir, image string, err error) {
	if _, err := s.checkpointer(); err != nil {
		return "", "", err
	}
	dir, err = s.imageDir(newArtifactID("create", "l"))
	if err != nil {
		return "", "", err
	}
	m, _, err := s.cfg.Checkpoints.Load(ctx, snapID, dir)
	if err == nil && m.Kind != kindSnapshot {
		err = errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", snapID)
	}
	if err == nil && req.Template != m.Template {
		err = errdefs.New(errdefs.ErrInvalidArgument, "snapshot %s is of template %q, not %q", snapID, m.Template, req.Template)
	}
	if err == nil {
		_, err = s.checkRestorable(m)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, m.Meta[metaTemplateImage], nil
}

// runSnapshotSchedules snapshots every running sandbox whose schedule is
// due, in the background, one at a time per sandbox, and keeps the newest
// SnapshotKeep of its snapshots.
func (s *Service) runSnapshotSchedules(ctx context.Context, entries map[string]*entry) {
	now := time.Now()
	for id, e := range entries {
		e.mu.Lock()
		due := e.rec.State == store.StateRunning && e.rec.SnapshotEvery > 0 && !e.snapshotting &&
			now.Sub(maxTime(e.lastSnapshot, e.rec.CreatedAt)) >= e.rec.SnapshotEvery
		keep := e.rec.SnapshotKeep
		if due {
			e.snapshotting = true
		}
		e.mu.Unlock()
		if !due {
			continue
		}
		go func() {
			_, err := s.TakeSnapshot(ctx, id)
			e.mu.Lock()
			e.snapshotting, e.lastSnapshot = false, time.Now()
			e.mu.Unlock()
			if err != nil {
				if !errors.Is(err, errdefs.ErrNotFound) {
					slog.Error("scheduled disk snapshot", "sandbox", id, "err", err)
				}
				return
			}
			s.trimSnapshots(ctx, id, keep)
		}()
	}
}

func (s *Service) trimSnapshots(ctx context.Context, id string, keep int) {
	if keep <= 0 {
		return
	}
	snaps, err := s.Snapshots(ctx, id)
	if err != nil {
		slog.Warn("list snapshots to trim", "sandbox", id, "err", err)
		return
	}
	for _, old := range snaps[min(keep, len(snaps)):] {
		if err := s.cfg.Checkpoints.Delete(ctx, old.ID); err != nil {
			slog.Warn("delete old snapshot", "sandbox", id, "snapshot", old.ID, "err", err)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
