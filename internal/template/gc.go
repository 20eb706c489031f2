package template

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/store"
)

// Collection. What a tagged build needs (its image on this node, its
// layers and start checkpoint in the object store) and what any sandbox
// runs on (running or paused) is kept. The rest is a cache: an image, layer,
// start checkpoint or file set nothing refers to goes once it is older
// than CacheTTL. Builds in progress hold everything: no collection runs
// while one does. A deleted template's images thus stay while its
// sandboxes do and go after them.

// RunCollector collects every interval until ctx ends.
func (s *Service) RunCollector(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Collect(ctx); err != nil {
				s.log.Warn("template collection", "err", err)
			}
		}
	}
}

// Collected counts what a collection removed.
type Collected struct {
	Images, Layers, Starts, Files int
}

// Collect removes what nothing uses and is older than CacheTTL.
func (s *Service) Collect(ctx context.Context) error {
	s.mu.Lock()
	busy := len(s.active) > 0
	s.mu.Unlock()
	if busy {
		return nil
	}
	keep, err := s.inUse(ctx)
	if err != nil {
		return err
	}
	if s.cfg.Checkpoints != nil {
		// A paused sandbox or a snapshot resumes on the image it was
		// taken on, whatever became of its template.
		saved, err := s.cfg.Checkpoints.List(ctx)
		if err != nil {
			return err
		}
		for _, m := range saved {
			if img := m.Meta[checkpoint.MetaImage]; img != "" {
				keep.images[img] = true
			}
		}
	}
	cutoff := time.Now().Add(-s.cfg.CacheTTL)
	var out Collected
	for _, rec := range s.im.list() {
		if keep.images[rec.ID] || rec.Created.After(cutoff) {
			continue
		}
		if err := s.im.remove(rec.ID); err != nil {
			return err
		}
		out.Images++
	}
	n, err := s.collectBaseImages(keep, cutoff)
	if err != nil {
		return err
	}
	out.Images += n
	manifests, err := s.cfg.Repo.List(ctx)
	if err != nil {
		return err
	}
	for _, m := range manifests {
		if m.CreatedAt.After(cutoff) {
			continue
		}
		var drop bool
		switch m.Kind {
		case checkpoint.KindLayer:
			drop = !keep.layers[strings.TrimPrefix(m.ID, "layer-")]
			if drop {
				out.Layers++
			}
		case checkpoint.KindStart:
			key := strings.TrimPrefix(m.ID, "start-")
			drop = !keep.starts[key]
			if drop {
				if dir, err := s.startDir(key, false); err == nil {
					os.RemoveAll(dir)
					os.Remove(dir + ".token")
				}
				out.Starts++
			}
		case checkpoint.KindFiles:
			drop = true
			os.Remove(filepath.Join(s.art.work, "files", strings.TrimPrefix(m.ID, "files-")+".tar"))
			out.Files++
		}
		if drop {
			if err := s.cfg.Repo.Delete(ctx, m.ID); err != nil {
				return err
			}
			s.forgetSize(m.ID)
		}
	}
	s.cfg.Metrics.collectedOf(out)
	if out != (Collected{}) {
		s.log.Info("template cache collected", "images", out.Images, "layers", out.Layers, "starts", out.Starts, "file_sets", out.Files)
	}
	s.cache.invalidate()
	return nil
}

// collectBaseImages removes the base template's images (rootfs-<recipe>-
// a<agent>, which the install script makes and never removes) that are
// not current, not in use and untouched since cutoff.
func (s *Service) collectBaseImages(keep *inUse, cutoff time.Time) (int, error) {
	base, err := s.base()
	if err != nil {
		return 0, nil // no base template: nothing of it to collect
	}
	dir := filepath.Join(s.cfg.Dir, BaseName)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "rootfs-") || !strings.Contains(name, "-a") || name == base.image || keep.images[name] {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return n, fmt.Errorf("remove base image %s: %w", name, err)
		}
		s.log.Info("base image collected", "image", name)
		n++
	}
	return n, nil
}

type inUse struct {
	images, layers, starts map[string]bool
}

// inUse is what tagged builds and sandboxes need.
func (s *Service) inUse(ctx context.Context) (*inUse, error) {
	u := &inUse{images: map[string]bool{}, layers: map[string]bool{}, starts: map[string]bool{}}
	recs, err := s.store.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Live() || r.State == store.StatePaused {
			u.images[r.Image] = true
		}
	}
	ts, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		for _, tag := range t.Tags {
			b, err := s.store.GetBuild(ctx, tag.Build)
			if err != nil || b.Result == nil {
				continue
			}
			u.images[b.Result.Image] = true
			u.images[b.Result.Base] = true // a base image its chain starts on
			for _, key := range b.Result.Layers {
				u.layers[key] = true
			}
			if n := len(b.Result.Layers); n > 0 {
				u.images[s.im.id(b.Result.Layers[n-1])] = true // the same image under this node's agent
			}
			if b.Result.Start != "" {
				u.starts[b.Result.Start] = true
			}
		}
	}
	return u, nil
}
