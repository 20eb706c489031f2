package template

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/rootfs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

var _ sandbox.Templates = (*Service)(nil)

// Resolve returns the image a new sandbox of ref runs on: the image of the
// build its tag points at (made on this node from its layers if missing)
// and, for a template with a start command, the checkpoint to restore.
// Results are cached until a template changes.
func (s *Service) Resolve(ctx context.Context, ref string) (*sandbox.Image, error) {
	if !tenant.FromContext(ctx).Admin {
		// Another tenant's template answers as an unknown one.
		if name, _, err := ParseRef(ref); err == nil && name != BaseName {
			if _, err := s.template(ctx, name, false); errors.Is(err, errdefs.ErrNotFound) {
				return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", name)
			} else if err != nil {
				return nil, err
			}
		}
	}
	if img := s.cache.get(ref); img != nil && (img.Start != nil || dirExists(img.Root)) {
		return img, nil
	}
	gen := s.cache.generation()
	img, err := s.resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	s.cache.put(ref, img, gen)
	return img, nil
}

func (s *Service) resolve(ctx context.Context, ref string) (*sandbox.Image, error) {
	name, tag, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	t, err := s.store.GetTemplate(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) && name == BaseName && tag == DefaultTag {
		base, err := s.base()
		if err != nil {
			return nil, err
		}
		return &sandbox.Image{Template: ref, ID: base.image, Root: base.root, User: base.config.User}, nil
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", name)
	}
	if err != nil {
		return nil, err // the catalog is away: not a missing template
	}
	buildID := tag // "name:<build id>" pins a build, as in E2B
	if tt, ok := t.Tags[tag]; ok {
		buildID = tt.Build
	}
	b, err := s.store.GetBuild(ctx, buildID)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	if err != nil || b.Template != name || b.State != store.BuildReady {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q has no ready build tagged %q", name, tag)
	}
	res := b.Result
	if res == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "build %s of template %s has no image", b.ID, name)
	}
	// What the image is made of stays while it is made and fetched.
	release := s.pins.pin(append(s.chainNames(chain{base: res.Base, layers: res.Layers}), startID(res.Start))...)
	defer release()
	cur, err := s.materialize(ctx, chain{base: res.Base, layers: res.Layers})
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "template %s: its image cannot be made on this node: %s", name, errdefs.PublicMessage(err))
	}
	cfg := decodeConfig(res.Config)
	limits := s.buildLimits(b)
	img := &sandbox.Image{Template: ref, ID: cur.id, Root: cur.root, Env: cfg.EnvMap(), User: cfg.User, Workdir: cfg.Workdir, Limits: limits}
	if img.User == "" {
		img.User = "root" // an image without USER runs as root, as in Docker
	}
	if res.Start != "" {
		key, err := s.startKey(ctx, b, cur)
		if err != nil {
			return nil, err
		}
		defer s.pins.pin(startID(key))()
		dir, token, err := s.localStart(ctx, key)
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "template %s: its started checkpoint cannot be fetched: %s", name, errdefs.PublicMessage(err))
		}
		img.Start = &sandbox.StartImage{ID: key[:12], Dir: dir, Token: token, Limits: limits}
	}
	return img, nil
}

// ImageRoot is the directory of image (of template): a cached image, or
// one of the base template's. An image this node lacks (a sandbox paused
// on another node resumes here) is made from the layers of the build that
// made it, whatever became of its template: the collector keeps them
// while a sandbox or checkpoint names the image. Made under this node's
// agent, it may be the same files under another image id.
func (s *Service) ImageRoot(template, image string) (string, error) {
	if strings.HasPrefix(image, imagePrefix) {
		if s.im.has(image) {
			return s.im.path(image), nil
		}
		return s.remake(context.Background(), template, image)
	}
	if image == "" {
		img, err := s.Resolve(context.Background(), template)
		if err != nil {
			return "", err
		}
		return img.Root, nil
	}
	return s.baseRoot(image)
}

// remake makes image (of template) on this node from its build's chain.
func (s *Service) remake(ctx context.Context, template, image string) (string, error) {
	builds, err := s.store.ListBuilds(ctx)
	if err != nil {
		return "", err
	}
	res := s.chains(builds)[image]
	if res == nil {
		return "", errdefs.New(errdefs.ErrFailedPrecondition, "image %s of template %q is not on this node and no build says how to make it", image, template)
	}
	c := chain{base: res.Base, layers: res.Layers}
	release := s.pins.pin(s.chainNames(c)...)
	defer release()
	cur, err := s.materialize(ctx, c)
	if err != nil {
		return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "image %s of template %q cannot be made on this node: %s", image, template, errdefs.PublicMessage(err))
	}
	return cur.root, nil
}

// baseInfo describes the base template (made by the install script).
type baseInfo struct {
	image  string // its image directory's name, rootfs-<recipe>-a<agent>
	root   string
	recipe string // the hash of its recipe
	config recipe.Config
}

// base reads the base template as the install script left it.
func (s *Service) base() (*baseInfo, error) {
	dir := filepath.Join(s.cfg.Dir, BaseName)
	root, err := filepath.EvalSymlinks(filepath.Join(dir, "current"))
	if err == nil {
		_, err = rootfs.Stat(root, "usr/local/bin/space-agent")
	}
	if err != nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found (run scripts/build-template.sh)", BaseName)
	}
	var meta struct {
		Recipe string `json:"recipe"`
	}
	if data, err := os.ReadFile(filepath.Join(dir, "template.json")); err == nil {
		json.Unmarshal(data, &meta)
	}
	if meta.Recipe == "" {
		meta.Recipe = filepath.Base(root)
	}
	// The base image's own convention: commands run as "user" in its home.
	return &baseInfo{image: filepath.Base(root), root: root, recipe: meta.Recipe, config: recipe.Config{User: "user"}}, nil
}

// baseRoot is an image directory of the base template: the one named, or
// (if it was replaced by a newer agent) the current one of the same
// recipe, whose files are the same but for the agent.
func (s *Service) baseRoot(image string) (string, error) {
	if !strings.HasPrefix(image, "rootfs-") || strings.ContainsAny(image, "/\\") || image == "." {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "image name %q is not valid", image)
	}
	root := filepath.Join(s.cfg.Dir, BaseName, image)
	if _, err := rootfs.Stat(root, "usr/local/bin/space-agent"); err == nil {
		// The image may be a link (a base kept on another disk): images
		// are cloned from, and sandboxes run on, the directory itself.
		return filepath.EvalSymlinks(root)
	}
	if base, err := s.base(); err == nil && recipeOf(base.image) == recipeOf(image) {
		return base.root, nil
	}
	return "", errdefs.New(errdefs.ErrFailedPrecondition, "base image %s is no longer on this node (it has %s): rebuild the template", image, s.baseName())
}

func (s *Service) baseName() string {
	if b, err := s.base(); err == nil {
		return b.image
	}
	return "none"
}

// recipeOf is the recipe part of a base image name, rootfs-<recipe>-a<agent>.
func recipeOf(image string) string {
	r, _, _ := strings.Cut(strings.TrimPrefix(image, "rootfs-"), "-")
	return r
}

func (s *Service) baseInfo(ctx context.Context) (*TemplateInfo, error) {
	base, err := s.base()
	if err != nil {
		return nil, err
	}
	info := &TemplateInfo{Name: BaseName, Builtin: true, Tags: []TagInfo{{Tag: DefaultTag, Image: base.image}}}
	if st, err := os.Stat(base.root); err == nil {
		info.CreatedAt, info.UpdatedAt = st.ModTime().UTC(), st.ModTime().UTC()
	}
	// Every base image, whichever recipe and agent made it.
	held, err := s.store.HeldImages(ctx)
	if err != nil {
		return nil, err
	}
	held = slices.DeleteFunc(held, func(image string) bool { return !strings.HasPrefix(image, "rootfs-") })
	if info.Sandboxes, err = s.store.CountOnImages(ctx, held); err != nil {
		return nil, err
	}
	return info, nil
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// resolveCache keeps resolved templates until any template changes.
type resolveCache struct {
	mu   sync.Mutex
	gen  uint64
	refs map[string]*sandbox.Image
}

func (c *resolveCache) get(ref string) *sandbox.Image {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refs[ref]
}

func (c *resolveCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps img unless a change happened since gen (when it was read).
func (c *resolveCache) put(ref string, img *sandbox.Image, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if c.refs == nil {
		c.refs = map[string]*sandbox.Image{}
	}
	c.refs[ref] = img
}

func (c *resolveCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.refs = nil
}
