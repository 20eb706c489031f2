package template

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/rootfs"
	"github.com/spacesandbox/space/internal/store"
)

// Collection. What a tagged build needs (its image on this node, its
// layers and start checkpoint in the object store) and what any sandbox
// runs on or will resume on (running, paused, or named by a checkpoint or
// snapshot: its image and the layers it is made of, so that another node
// can make it again) is kept. The rest is a cache: an image, layer, start
// checkpoint or file set nothing refers to goes once it is older than
// CacheTTL. Builds and resolves in progress pin what they use (pins.go),
// and nothing pinned is removed. A deleted template's images and layers
// thus stay while its sandboxes and their checkpoints do and go after
// them.

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
	s.collecting.Lock()
	defer s.collecting.Unlock()
	defer s.pins.collect()()
	keep, err := s.inUse(ctx)
	if err != nil {
		return err
	}
	if s.collectHook != nil {
		s.collectHook()
	}
	cutoff := time.Now().Add(-s.cfg.CacheTTL)
	var out Collected
	for _, rec := range s.im.list() {
		if keep.images[rec.ID] || rec.Created.After(cutoff) {
			continue
		}
		var trash string
		removed, err := s.pins.unlessPinned(rec.ID, func() (err error) {
			trash, err = s.im.detach(rec.ID)
			return err
		})
		if err != nil {
			return err
		}
		if removed {
			if err := rootfs.Remove(trash); err != nil {
				return err
			}
			out.Images++
		}
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
		var local func() // what goes with it on this node
		count := new(int)
		switch m.Kind {
		case checkpoint.KindLayer:
			if keep.layers[strings.TrimPrefix(m.ID, "layer-")] {
				continue
			}
			count = &out.Layers
		case checkpoint.KindStart:
			key := strings.TrimPrefix(m.ID, "start-")
			if keep.starts[key] {
				continue
			}
			local = func() {
				if dir, err := s.startDir(key, false); err == nil {
					os.RemoveAll(dir)
					os.Remove(dir + ".token")
				}
			}
			count = &out.Starts
		case checkpoint.KindFiles:
			local = func() { os.Remove(filepath.Join(s.art.work, "files", strings.TrimPrefix(m.ID, "files-")+".tar")) }
			count = &out.Files
		default:
			continue
		}
		removed, err := s.pins.unlessPinned(m.ID, func() error {
			if local != nil {
				local()
			}
			return s.cfg.Repo.Delete(ctx, m.ID)
		})
		if err != nil {
			return err
		}
		if removed {
			*count++
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
		removed, err := s.pins.unlessPinned(name, func() error { return os.RemoveAll(filepath.Join(dir, name)) })
		if err != nil {
			return n, fmt.Errorf("remove base image %s: %w", name, err)
		}
		if removed {
			s.log.Info("base image collected", "image", name)
			n++
		}
	}
	return n, nil
}

type inUse struct {
	images, layers, starts map[string]bool
}

// inUse is what tagged builds, sandboxes and their checkpoints need.
func (s *Service) inUse(ctx context.Context) (*inUse, error) {
	u := &inUse{images: map[string]bool{}, layers: map[string]bool{}, starts: map[string]bool{}}
	builds, err := s.store.ListBuilds(ctx)
	if err != nil {
		return nil, err
	}
	chains := s.chains(builds)
	keepChain := func(res *store.BuildImage) {
		u.images[res.Image] = true
		u.images[res.Base] = true // a base image its chain starts on
		for _, key := range res.Layers {
			u.layers[key] = true
		}
		if n := len(res.Layers); n > 0 {
			u.images[s.im.id(res.Layers[n-1])] = true // the same image under this node's agent
		}
	}
	// A sandbox, running or paused, and a checkpoint or snapshot resume
	// on the image they were taken on, whatever became of its template:
	// on this node from its directory, on another from its layers.
	keepImage := func(image string) {
		u.images[image] = true
		if res := chains[image]; res != nil {
			keepChain(res)
		}
	}
	held, err := s.store.HeldImages(ctx)
	if err != nil {
		return nil, err
	}
	for _, image := range held {
		keepImage(image)
	}
	if s.cfg.Checkpoints != nil {
		saved, err := s.cfg.Checkpoints.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range saved {
			if img := m.Meta[checkpoint.MetaImage]; img != "" {
				keepImage(img)
			}
		}
	}
	ts, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*store.Build{}
	for _, b := range builds {
		byID[b.ID] = b
	}
	for _, t := range ts {
		for _, tag := range t.Tags {
			b := byID[tag.Build]
			if b == nil || b.Result == nil {
				continue
			}
			keepChain(b.Result)
			if b.Result.Start != "" {
				u.starts[b.Result.Start] = true
				key, _ := s.ownStart(b.Result)
				u.starts[key] = true // taken again here (retake.go)
			}
		}
	}
	return u, nil
}

// chains maps every image a build made to that build's result (its
// chain): by the image it recorded, and by the same image under this
// node's agent.
func (s *Service) chains(builds []*store.Build) map[string]*store.BuildImage {
	out := map[string]*store.BuildImage{}
	for _, b := range builds {
		res := b.Result
		if res == nil || len(res.Layers) == 0 {
			continue
		}
		out[res.Image] = res
		out[s.im.id(res.Layers[len(res.Layers)-1])] = res
	}
	return out
}
