package template

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/spacesandbox/space/internal/tenant"
)

// Disk use. A template's images need its builds' layers and start
// checkpoints in the object store and, on each node that made them, an
// image directory per layer (a hard-link farm: each holds only the file
// data its layer, agent and /tmp marker added) and a copy of each start
// checkpoint. What several of a template's builds share counts once; what
// it shares with another template (the layers of a template it was built
// from) counts in both; the base template, the platform's, counts in none.

// usage is what a set of builds needs: layer keys and start keys, each once.
type usage struct {
	layers, starts []string
}

func (u *usage) add(layers []string, start string) {
	for _, k := range layers {
		if !slices.Contains(u.layers, k) {
			u.layers = append(u.layers, k)
		}
	}
	if start != "" && !slices.Contains(u.starts, start) {
		u.starts = append(u.starts, start)
	}
}

// stored is the object store's bytes of u (encrypted and compressed, as
// stored); what is not (or no longer) there counts 0.
func (s *Service) stored(ctx context.Context, u usage) int64 {
	var n int64
	for _, k := range u.layers {
		n += s.storedSize(ctx, layerID(k))
	}
	for _, k := range u.starts {
		n += s.storedSize(ctx, startID(k))
	}
	return n
}

// storedSize is the stored size of artifact id, remembered: an artifact
// never changes under its id (the collector forgets the ones it removes).
func (s *Service) storedSize(ctx context.Context, id string) int64 {
	if n, ok := s.sizes.Load(id); ok {
		return n.(int64)
	}
	m, err := s.cfg.Repo.Get(ctx, id)
	if err != nil {
		return 0
	}
	s.sizes.Store(id, m.Bytes)
	return m.Bytes
}

// local is the bytes of file data u's images and start checkpoints hold
// on this node (those it does not have count 0).
func (s *Service) local(u usage) int64 {
	var n int64
	for _, k := range u.layers {
		id := s.im.id(k)
		if rec, err := s.im.record(id); err == nil && s.im.has(id) {
			n += rec.disk()
		}
	}
	for _, k := range u.starts {
		if dir, err := s.startDir(k, false); err == nil {
			n += filesSize(dir)
		}
	}
	return n
}

// filesSize is the bytes of the regular files under dir (0 if none).
func filesSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// forgetSize drops artifact id's remembered size (it was removed).
func (s *Service) forgetSize(id string) { s.sizes.Delete(id) }

// TenantBytes is what tenant t's templates hold in the object store: the
// layers and start checkpoints of the builds their tags point at, each
// once however many of its builds and templates share it (the tenant's
// template_mb quota counts this).
func (s *Service) TenantBytes(ctx context.Context, t string) (int64, error) {
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return 0, err
	}
	var use usage
	for _, tpl := range all {
		if tenant.Of(tpl.Tenant) != t {
			continue
		}
		for _, tag := range tpl.Tags {
			if b, err := s.store.GetBuild(ctx, tag.Build); err == nil && b.Result != nil {
				use.add(b.Result.Layers, b.Result.Start)
			}
		}
	}
	return s.stored(ctx, use), nil
}
