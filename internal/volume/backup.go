package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// A backup is a volume's files at one instant, in the object store as a
// checkpoint.Repo artifact set of kind "volume": the archive encrypted
// under its own data key (wrapped by the platform key, as checkpoints are)
// and the manifest written last, so a backup is listed and restorable only
// once complete. Any node sharing the object store (and the platform key)
// can make a new volume from it: that is how a volume moves to another
// node. While the backup reads the volume, writes wait: the content
// methods on the volume's lock, and a sandbox holding it read-write on a
// frozen filesystem (fsfreeze), so the copy is point-in-time.

// Manifest Meta keys of a backup.
const (
	metaVolumeName = "volume"
	metaVolumeID   = "volume_id"
	metaSizeMB     = "size_mb"
	metaFiles      = "files"
	metaFileBytes  = "file_bytes"
)

const archiveName = "volume.tar.zst"

// Backup describes a stored backup.
type Backup struct {
	ID         string
	VolumeID   string
	VolumeName string
	// SizeMB is the volume's size limit when it was backed up.
	SizeMB    int
	CreatedAt time.Time
	// Files and FileBytes count what it holds; Bytes is what it takes in
	// the object store (compressed, encrypted).
	Files     int
	FileBytes int64
	Bytes     int64
	Took      time.Duration
}

func backupFrom(m *checkpoint.Manifest) *Backup {
	b := &Backup{ID: m.ID, VolumeID: m.Meta[metaVolumeID], VolumeName: m.Meta[metaVolumeName], CreatedAt: m.CreatedAt, Bytes: m.Bytes, Took: m.Took}
	b.SizeMB = backupSize(m)
	b.Files, _ = strconv.Atoi(m.Meta[metaFiles])
	b.FileBytes, _ = strconv.ParseInt(m.Meta[metaFileBytes], 10, 64)
	return b
}

func backupSize(m *checkpoint.Manifest) int {
	n, _ := strconv.Atoi(m.Meta[metaSizeMB])
	return n
}

func (s *Service) repo() (*checkpoint.Repo, error) {
	if s.cfg.Backups == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "this node has no object store for volume backups")
	}
	return s.cfg.Backups, nil
}

// TakeBackup backs volume ref up to the object store.
func (s *Service) TakeBackup(ctx context.Context, ref string) (_ *Backup, err error) {
	repo, err := s.repo()
	if err != nil {
		return nil, err
	}
	v, err := s.lookup(ctx, ref)
	if err != nil {
		return nil, err
	}
	ctx = context.WithoutCancel(ctx)
	defer s.backups.Lock(v.ID)()
	start := time.Now()
	id := v.ID + "-b" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dir := filepath.Join(s.cfg.ImagesDir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup dir: %w", err)
	}
	defer os.RemoveAll(dir)
	stats, err := s.archive(ctx, v, filepath.Join(dir, archiveName))
	if err != nil {
		return nil, err
	}
	tArchive := time.Now()
	m := &checkpoint.Manifest{
		ID: id, Kind: checkpoint.KindVolume, CreatedAt: start.UTC(),
		Meta: map[string]string{
			metaVolumeName: v.Name, metaVolumeID: v.ID, metaSizeMB: strconv.Itoa(v.SizeMB),
			metaFiles: strconv.Itoa(stats.Files), metaFileBytes: strconv.FormatInt(stats.Bytes, 10),
		},
	}
	if err := repo.Save(ctx, m, dir, nil); err != nil {
		return nil, err
	}
	s.log.Info("volume backed up", "volume", v.ID, "name", v.Name, "backup", id, "files", stats.Files,
		"bytes", m.Bytes, "archive_ms", tArchive.Sub(start).Milliseconds(), "upload_ms", time.Since(tArchive).Milliseconds())
	return backupFrom(m), nil
}

// archive writes volume v's files to file out, with every write to the
// volume held off meanwhile.
func (s *Service) archive(ctx context.Context, v *store.Volume, out string) (archiveStats, error) {
	unlock := s.lockContent(v.ID, true)
	defer unlock()
	holders, err := s.holders(ctx)
	if err != nil {
		return archiveStats{}, err
	}
	for _, h := range holders[v.ID] {
		if !h.ReadOnly && h.State == store.StateRunning {
			if err := s.disk.freeze(ctx, v.ID); err != nil {
				return archiveStats{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not hold writes to volume %q for the backup", v.Name)
			}
			defer func() {
				if err := s.disk.thaw(context.WithoutCancel(ctx), v.ID); err != nil {
					s.log.Error("thaw volume after backup", "volume", v.ID, "err", err)
				}
			}()
			break
		}
	}
	root, err := os.OpenRoot(s.disk.root(v.ID))
	if err != nil {
		return archiveStats{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "volume %q is not available on this node", v.Name)
	}
	defer root.Close()
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return archiveStats{}, fmt.Errorf("backup archive: %w", err)
	}
	stats, err := writeArchive(root, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return stats, fmt.Errorf("archive volume %s: %w", v.ID, err)
	}
	return stats, nil
}

// restoreBackup fills new volume rec (made, mounted, empty) from backup m.
func (s *Service) restoreBackup(ctx context.Context, m *checkpoint.Manifest, rec *store.Volume) error {
	repo, err := s.repo()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.cfg.ImagesDir, rec.ID+"-restore")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("restore dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if _, _, err := repo.Load(ctx, m.ID, dir); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(dir, archiveName))
	if err != nil {
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "backup %s holds no archive", m.ID)
	}
	defer f.Close()
	root, err := os.OpenRoot(s.disk.root(rec.ID))
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := readArchive(root, f); err != nil {
		if errdefs.Class(err) != nil {
			return err
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return errdefs.Wrap(errdefs.ErrNoSpace, err, "backup %s does not fit in %d MB: give the volume a larger size_mb", m.ID, rec.SizeMB)
		}
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "backup %s could not be restored", m.ID)
	}
	return nil
}

// backupManifest returns backup id's manifest (a volume backup only).
func (s *Service) backupManifest(ctx context.Context, id string) (*checkpoint.Manifest, error) {
	repo, err := s.repo()
	if err != nil {
		return nil, err
	}
	m, err := repo.Get(ctx, id)
	if errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, errdefs.ErrNotFound) || err == nil && m.Kind != checkpoint.KindVolume {
		return nil, errdefs.New(errdefs.ErrNotFound, "volume backup %q not found", id)
	}
	return m, err
}

// GetBackup returns backup id.
func (s *Service) GetBackup(ctx context.Context, id string) (*Backup, error) {
	m, err := s.backupManifest(ctx, id)
	if err != nil {
		return nil, err
	}
	return backupFrom(m), nil
}

// Backups lists the backups in the object store (every node's), newest
// first; volume, when set, keeps those of volumes of that name or ID.
func (s *Service) Backups(ctx context.Context, volume string) ([]*Backup, error) {
	if s.cfg.Backups == nil {
		return nil, nil
	}
	all, err := s.cfg.Backups.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Backup
	for _, m := range all {
		if m.Kind != checkpoint.KindVolume {
			continue
		}
		b := backupFrom(m)
		if volume == "" || b.VolumeName == volume || b.VolumeID == volume {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteBackup deletes backup id. Volumes made from it are not affected.
func (s *Service) DeleteBackup(ctx context.Context, id string) error {
	if _, err := s.backupManifest(ctx, id); err != nil {
		return err
	}
	return s.cfg.Backups.Delete(ctx, id)
}

// RunSweeper deletes, every interval until ctx ends, the artifacts of
// backups whose upload never finished (a crash mid-backup, here or on any
// node sharing the store) once they are an hour old.
func (s *Service) RunSweeper(ctx context.Context, every time.Duration) {
	if s.cfg.Backups == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := s.cfg.Backups.SweepIncomplete(ctx, time.Hour); err != nil {
			s.log.Warn("sweep incomplete volume backups", "err", err)
		} else if n > 0 {
			s.log.Info("swept incomplete volume backups", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
