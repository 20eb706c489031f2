// Package template builds templates and gives sandboxes their images. A
// build runs a recipe (package recipe) step by step, each RUN and COPY in
// a sandbox of its own, and keeps each step's writable layer under a cache
// key in the object store; a template name's tags point at ready builds.
// Sandboxes resolve a template to an image directory on this node (made
// from the layers when missing) and, when the template has a start
// command, to the checkpoint of that command running.
package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
	"golang.org/x/sync/singleflight"
)

// Boxes starts the sandboxes build steps run in.
type Boxes interface {
	StartBuildBox(ctx context.Context, spec sandbox.BuildBoxSpec) (*sandbox.BuildBox, error)
}

// Store is what the service keeps templates and builds in, and asks which
// images sandboxes hold (a collection keeps those, resolve reports them).
type Store interface {
	store.Templates
	HeldImages(ctx context.Context) ([]string, error)
	CountOnImages(ctx context.Context, images []string) (int, error)
}

// Config of the service.
type Config struct {
	// Dir is the templates directory: base/ (made by the install script),
	// _images/ (the node's image cache), _starts/ (started templates'
	// checkpoints), _agents/ (the agents images got).
	Dir string
	// WorkDir is scratch space (emptied at start): uploads, layers in
	// transit, copies of file sets. It belongs to one spaced.
	WorkDir string
	// LogDir holds build logs.
	LogDir string
	Store  Store
	// Node names this node in a cluster: builds it runs carry it, and a
	// restart fails only its own ("" with the embedded store).
	Node string
	// Repo stores layers, file sets and start checkpoints (templates/).
	Repo *checkpoint.Repo
	// Checkpoints are the sandboxes' checkpoints and snapshots: the images
	// they name are kept (nil: none are).
	Checkpoints *checkpoint.Repo
	Boxes       Boxes
	Puller      *ociimage.Puller
	// Agent is the agent binary put into every image.
	Agent string
	// Engine names the runtime build (start checkpoints restore only in it).
	Engine string
	// Defaults are the node's sandbox limits.
	Defaults runtime.Limits
	// MaxBuilds bounds builds running at once (more wait, queued).
	MaxBuilds int
	// ReserveBuild takes a build of cpu vCPUs and memoryMB MiB from the
	// quotas of ctx's tenant (the sandbox service's ReserveBuild), or
	// refuses it; the build gives it back when it ends. nil: no quotas.
	ReserveBuild func(ctx context.Context, cpu, memoryMB int) (release func(), err error)
	// BuildTimeout bounds one build.
	BuildTimeout time.Duration
	// Network is the egress policy of build steps when a build names none.
	Network *sandbox.NetworkPolicy
	// CacheTTL is how long an image no template or sandbox uses is kept
	// on this node, and a layer no build refers to in the object store.
	CacheTTL time.Duration
	// MaxImage bounds what a build unpacks on the host: a source image
	// (its layers' compressed sizes when the build is requested, its
	// flattened tar as it streams), a step's layer, and each layer an
	// image is made of (default 16 GiB).
	MaxImage int64
	// MaxContext bounds what an uploaded file set expands to as a build
	// reads it, and what one tenant's builds hold of expanded file sets on
	// the node at once (default DefaultMaxContext; see bounds.go).
	MaxContext int64
	// DiskFloor is what uploads and expansions leave free on the work
	// dir's filesystem (0: the node's floor, admission.DiskFloor).
	DiskFloor int64
	// Changed is told when a template's tags move (a build is ready, a tag
	// is set or removed, the template is deleted): warm pools refill.
	Changed func(name string)
	// Metrics, if set, counts builds and collections.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Service builds templates and resolves them for sandboxes.
type Service struct {
	cfg   Config
	log   *slog.Logger
	store Store
	boxes Boxes
	im    *images
	art   *artifacts
	slots chan struct{}
	// retakes are the start checkpoints being taken again for this
	// node's runtime (retake.go), by key.
	retakes singleflight.Group

	mu     sync.Mutex
	active map[string]*active // running or queued builds
	logs   map[string]*buildLog
	// retakeFailed: the last failed take of each start key (retake.go).
	retakeFailed map[string]retakeFailure
	closed       bool
	wg           sync.WaitGroup

	starts keylock.Map
	cache  resolveCache
	sizes  sync.Map // artifact id -> stored bytes (see usage.go)
	// contexts is what each tenant's builds hold of expanded file sets
	// (see bounds.go).
	contexts contextBytes

	pins       pins       // what builds and resolves use (see pins.go)
	collecting sync.Mutex // one collection at a time
	// collectHook, if set (tests), runs in a collection once it chose
	// what to keep.
	collectHook func()
}

// active is a build that is queued or running.
type active struct {
	cancel context.CancelCauseFunc
	log    *buildLog
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	tagRE  = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// DefaultTag is the tag a name alone means ("app" is "app:default").
const DefaultTag = "default"

// BaseName is the template the install script makes; it cannot be built.
const BaseName = "base"

// New opens the service: builds that a restart cut off are failed (their
// sandboxes are gone, and nothing they made half-way is ever used).
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.MaxBuilds <= 0 {
		cfg.MaxBuilds = 2
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = 30 * time.Minute
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = 7 * 24 * time.Hour
	}
	if cfg.MaxImage <= 0 {
		cfg.MaxImage = 16 << 30
	}
	if cfg.MaxContext <= 0 {
		cfg.MaxContext = DefaultMaxContext
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	agent, err := loadAgent(cfg.Agent, filepath.Join(cfg.Dir, "_agents"))
	if err != nil {
		return nil, err
	}
	im, err := newImages(filepath.Join(cfg.Dir, "_images"), agent, cfg.MaxImage, log)
	if err != nil {
		return nil, err
	}
	work := cfg.WorkDir
	if err := os.RemoveAll(work); err != nil {
		return nil, fmt.Errorf("template work dir: %w", err)
	}
	for _, d := range []string{work, filepath.Join(cfg.Dir, "_starts"), cfg.LogDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("template dirs: %w", err)
		}
	}
	s := &Service{
		cfg: cfg, log: log, store: cfg.Store, boxes: cfg.Boxes, im: im,
		art:    &artifacts{repo: cfg.Repo, work: work},
		slots:  make(chan struct{}, cfg.MaxBuilds),
		active: map[string]*active{}, logs: map[string]*buildLog{}, retakeFailed: map[string]retakeFailure{},
	}
	if err := s.failInterrupted(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// failInterrupted fails builds a restart cut off.
func (s *Service) failInterrupted(ctx context.Context) error {
	builds, err := s.store.ListBuilds(ctx)
	if err != nil {
		return fmt.Errorf("templates: %w", err)
	}
	for _, b := range builds {
		if b.State != store.BuildQueued && b.State != store.BuildBuilding || b.Node != s.cfg.Node {
			continue // another node's runs on
		}
		l := s.buildLog(b.ID)
		l.add("error", b.Step, "the build was interrupted by a restart of spaced; nothing it made half-way is used: build again")
		l.finish()
		b.State, b.FinishedAt = store.BuildError, time.Now().UTC()
		b.Error = &store.BuildErr{Step: b.Step, Message: "the build was interrupted by a restart of spaced: build again"}
		if err := s.store.PutBuild(ctx, b, nil); err != nil {
			return fmt.Errorf("templates: %w", err)
		}
		s.log.Warn("build interrupted by a restart", "build", b.ID, "template", b.Template)
	}
	return nil
}

// FailBuildsOfLostNodes fails the queued and running builds of nodes the
// cluster reported lost (their lease lapsed): their sandboxes went with
// the node, and nothing they made half-way is used. A node that was only
// away finds its builds ended when it next records progress, and stops
// them. It answers how many it failed.
func (s *Service) FailBuildsOfLostNodes(ctx context.Context, lost []string) (int, error) {
	if len(lost) == 0 {
		return 0, nil
	}
	builds, err := s.store.ListBuilds(ctx)
	if err != nil {
		return 0, fmt.Errorf("templates: %w", err)
	}
	n := 0
	for _, b := range builds {
		if b.State != store.BuildQueued && b.State != store.BuildBuilding || b.Node == s.cfg.Node || !slices.Contains(lost, b.Node) {
			continue
		}
		msg := fmt.Sprintf("the build's node %s was lost (it stopped renewing its lease); nothing it made half-way is used: build again", b.Node)
		b.State, b.FinishedAt = store.BuildError, time.Now().UTC()
		b.Error = &store.BuildErr{Step: b.Step, Message: msg}
		if err := s.store.PutBuild(ctx, b, nil); err != nil {
			return n, fmt.Errorf("templates: %w", err)
		}
		s.cfg.Metrics.ended(b.State, b.FinishedAt.Sub(b.CreatedAt).Seconds(), b.Layered, b.Cached)
		s.log.Warn("build failed: its node was lost", "build", b.ID, "template", b.Template, "node", b.Node)
		n++
	}
	return n, nil
}

// Close cancels running builds and waits for them to stop.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	for _, a := range s.active {
		a.cancel(errShutdown)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.im.close()
}

var (
	errShutdown = errors.New("spaced is shutting down")
	errCanceled = errors.New("canceled by request")
	// errEnded: another node ended the build's record (it reported this
	// node lost) while it ran here.
	errEnded = errors.New("the build was ended by the cluster while it ran")
)

// ParseRef splits "name[:tag]" and checks both.
func ParseRef(ref string) (name, tag string, err error) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !hasTag || tag == "" {
		tag = DefaultTag
	}
	if !nameRE.MatchString(name) {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "template name %q is not valid: use 1-63 of a-z 0-9 . _ -, starting with a letter or digit", name)
	}
	if !tagRE.MatchString(tag) {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "tag %q is not valid: use 1-128 of A-Z a-z 0-9 . _ -", tag)
	}
	return name, tag, nil
}

// buildLog returns the log of build id (opened from disk the first time).
func (s *Service) buildLog(id string) *buildLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[id]; l != nil {
		return l
	}
	l, err := openLog(filepath.Join(s.cfg.LogDir, id+".log"))
	if err != nil {
		s.log.Warn("open build log", "build", id, "err", err)
		l = &buildLog{path: filepath.Join(s.cfg.LogDir, id+".log"), changed: make(chan struct{})}
	}
	s.logs[id] = l
	return l
}

// progress records how far a build got (best effort: the log has it all).
// A build whose record another node ended (it reported this one lost) is
// stopped here.
func (s *Service) progress(id string, step, cached int) {
	ctx := context.Background()
	b, err := s.store.GetBuild(ctx, id)
	if err != nil {
		return
	}
	if b.Final() {
		s.mu.Lock()
		a := s.active[id]
		s.mu.Unlock()
		if a != nil {
			a.cancel(errEnded)
		}
		return
	}
	b.Step, b.Cached = step, cached
	if err := s.store.PutBuild(ctx, b, nil); err != nil {
		s.log.Debug("record build progress", "build", id, "err", err)
	}
}

// startDir is where a started template's checkpoint lives on this node.
func (s *Service) startDir(key string, mk bool) (string, error) {
	dir := filepath.Join(s.cfg.Dir, "_starts")
	if mk {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "s-"+key[:32]), nil
}

// keepStart moves a checkpoint image into place as dir, its token beside
// it, unless a complete one is there already: a checkpoint and the token
// its agent holds are a pair (another build of the same key, or another
// daemon sharing the templates directory, may have kept its own), so a
// kept pair is never half replaced. The token goes last: a dir without
// one is half-kept and replaced. The caller holds s.starts for the key.
func (s *Service) keepStart(tmp, dir, token string) error {
	if _, err := os.Stat(dir + ".token"); err == nil {
		if _, err := os.Stat(dir); err == nil {
			return nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	part := dir + ".token.tmp-" + randHex(4)
	if err := os.WriteFile(part, []byte(token), 0o600); err != nil {
		return err
	}
	if err := os.Rename(part, dir+".token"); err != nil {
		os.Remove(part)
		return err
	}
	return nil
}

// hasStart reports whether a started template's checkpoint is stored
// (a copy on this node may outlive the stored one, which other nodes need).
func (s *Service) hasStart(ctx context.Context, key string) (bool, error) {
	return s.art.has(ctx, startID(key))
}

// localStart returns the local checkpoint of a started template and its
// token, fetching it from the object store when this node lacks it.
func (s *Service) localStart(ctx context.Context, key string) (string, string, error) {
	dir, err := s.startDir(key, true)
	if err != nil {
		return "", "", err
	}
	unlock := s.starts.Lock(key)
	defer unlock()
	if token, err := os.ReadFile(dir + ".token"); err == nil {
		if _, err := os.Stat(dir); err == nil {
			return dir, string(token), nil
		}
	}
	tmp := dir + ".tmp-" + randHex(4)
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", "", err
	}
	token, err := s.art.loadStart(ctx, key, tmp)
	if err != nil {
		return "", "", fmt.Errorf("started template %s: %w", key[:12], err)
	}
	if err := s.keepStart(tmp, dir, token); err != nil {
		return "", "", err
	}
	return dir, token, nil
}

// imageRef is an image on this node.
type imageRef struct {
	id, root string
}

// materialize returns the image made by chain c on this node, making what
// is missing: from the deepest image of the chain that is here, each
// further layer is fetched and applied.
func (s *Service) materialize(ctx context.Context, c chain) (imageRef, error) {
	start := -1
	for i := len(c.layers) - 1; i >= 0; i-- {
		if s.im.has(s.im.id(c.layers[i])) {
			start = i
			break
		}
	}
	var cur imageRef
	switch {
	case start >= 0:
		id := s.im.id(c.layers[start])
		cur = imageRef{id, s.im.path(id)}
	case c.base != "":
		root, err := s.baseRoot(c.base)
		if err != nil {
			return imageRef{}, err
		}
		cur = imageRef{c.base, root}
	}
	for _, key := range c.layers[start+1:] {
		id, err := s.im.derive(ctx, key, cur.id, cur.root, func() (io.ReadCloser, error) { return s.art.openLayer(ctx, key) })
		if err != nil {
			return imageRef{}, err
		}
		cur = imageRef{id, s.im.path(id)}
	}
	if cur.root == "" {
		return imageRef{}, fmt.Errorf("empty image chain")
	}
	return cur, nil
}

// changed drops resolved images and tells the pools.
func (s *Service) changed(name string) {
	s.cache.invalidate()
	if s.cfg.Changed != nil {
		s.cfg.Changed(name)
	}
}

// Build and template listings.

// TemplateInfo is a template as the API shows it.
type TemplateInfo struct {
	Name      string
	Builtin   bool
	Tags      []TagInfo
	CreatedAt time.Time
	UpdatedAt time.Time
	// Bytes is what its tagged builds need in the object store (layers,
	// start checkpoints), each counted once; LocalBytes what their images
	// and start checkpoints hold on this node (see usage.go).
	Bytes      int64
	LocalBytes int64
	// Sandboxes counts sandboxes (running or paused) of its images.
	Sandboxes int
}

// TagInfo is a tag and the build it points at.
type TagInfo struct {
	Tag   string
	Build string
	At    time.Time
	Image string
}

// Template describes one template.
func (s *Service) Template(ctx context.Context, name string) (*TemplateInfo, error) {
	if name == BaseName {
		return s.baseInfo(ctx)
	}
	t, err := s.template(ctx, name, false)
	if err != nil {
		return nil, err
	}
	return s.info(ctx, t)
}

// Templates lists every template, the base first.
func (s *Service) Templates(ctx context.Context) ([]*TemplateInfo, error) {
	var out []*TemplateInfo
	if base, err := s.baseInfo(ctx); err == nil {
		out = append(out, base)
	}
	ts, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ts, func(a, b *store.Template) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range ts {
		if !visible(ctx, t.Tenant) {
			continue
		}
		info, err := s.info(ctx, t)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func (s *Service) info(ctx context.Context, t *store.Template) (*TemplateInfo, error) {
	info := &TemplateInfo{Name: t.Name, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	images := map[string]bool{}
	var use usage
	for _, tag := range slices.Sorted(maps.Keys(t.Tags)) {
		tt := t.Tags[tag]
		ti := TagInfo{Tag: tag, Build: tt.Build, At: tt.At}
		if b, err := s.store.GetBuild(ctx, tt.Build); err == nil && b.Result != nil {
			ti.Image = b.Result.Image
			images[ti.Image] = true
			use.add(b.Result.Layers, b.Result.Start)
		}
		info.Tags = append(info.Tags, ti)
	}
	info.Bytes, info.LocalBytes = s.stored(ctx, use), s.local(use)
	n, err := s.store.CountOnImages(ctx, slices.Collect(maps.Keys(images)))
	if err != nil {
		return nil, err
	}
	info.Sandboxes = n
	return info, nil
}

// Build returns one build.
func (s *Service) Build(ctx context.Context, id string) (*Build, error) {
	b, err := s.build(ctx, id)
	if err != nil {
		return nil, err
	}
	return buildOf(b), nil
}

// Builds lists the builds of template name (all when empty), newest first.
func (s *Service) Builds(ctx context.Context, name string) ([]*Build, error) {
	builds, err := s.builds(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]*Build, len(builds))
	for i, b := range builds {
		out[i] = buildOf(b)
	}
	return out, nil
}

// builds are the records of Builds.
func (s *Service) builds(ctx context.Context, name string) ([]*store.Build, error) {
	all, err := s.store.ListBuilds(ctx)
	if err != nil {
		return nil, err
	}
	p := tenant.FromContext(ctx)
	var out []*store.Build
	for _, b := range all {
		if (name == "" || b.Template == name) && p.Owns(b.Tenant) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *store.Build) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// Logs returns up to limit entries of build id's log from offset, whether
// the build is over, and a channel closed when more may be there.
func (s *Service) Logs(ctx context.Context, id string, offset, limit int) ([]LogEntry, bool, <-chan struct{}, error) {
	b, err := s.build(ctx, id)
	if err != nil {
		return nil, false, nil, err
	}
	entries, done, changed := s.buildLog(id).read(offset, limit)
	return entries, done || b.Final() && !s.isActive(id), changed, nil
}

func (s *Service) isActive(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active[id] != nil
}

// CancelBuild stops a queued or running build.
func (s *Service) CancelBuild(ctx context.Context, id string) (*Build, error) {
	b, err := s.cancelBuild(ctx, id)
	if err != nil {
		return nil, err
	}
	return buildOf(b), nil
}

func (s *Service) cancelBuild(ctx context.Context, id string) (*store.Build, error) {
	b, err := s.build(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.Final() {
		return b, nil
	}
	if b.Node != s.cfg.Node {
		// Only its node can stop it (a cluster forwards the request
		// there); marked canceled here it would run on.
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "build %s runs on node %s: cancel it there (through any node, which forwards the request)", id, b.Node)
	}
	s.mu.Lock()
	a := s.active[id]
	s.mu.Unlock()
	if a != nil {
		a.cancel(errCanceled)
		return b, nil
	}
	// A waiting build (requested, never started) ends here.
	b.State, b.FinishedAt = store.BuildCanceled, time.Now().UTC()
	b.Error = &store.BuildErr{Step: b.Step, Message: "canceled by request"}
	return b, s.store.PutBuild(ctx, b, nil)
}

// DeleteTemplate removes a template's name and tags. Its images stay on
// the node while sandboxes use them and go with the next collection after
// that; its builds in progress are canceled.
func (s *Service) DeleteTemplate(ctx context.Context, name string) error {
	if name == BaseName {
		return errdefs.New(errdefs.ErrFailedPrecondition, "the base template is the platform's and cannot be deleted")
	}
	if _, err := s.template(ctx, name, true); err != nil {
		return err
	}
	builds, err := s.builds(ctx, name)
	if err != nil {
		return err
	}
	for _, b := range builds {
		if !b.Final() {
			if _, err := s.cancelBuild(ctx, b.ID); err != nil {
				return err
			}
		}
	}
	if err := s.store.DeleteTemplate(ctx, name); err != nil {
		return err
	}
	s.changed(name)
	s.log.Info("template deleted", "template", name)
	return nil
}

// SetTags points tags of template name at target's build ("name:tag" or
// a build id); name "" means target's own template. A build of another
// template than name is refused, and nothing is changed unless every
// check passed.
func (s *Service) SetTags(ctx context.Context, name, target string, tags []string) (*Build, error) {
	for _, tag := range tags {
		if !tagRE.MatchString(tag) {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "tag %q is not valid: use 1-128 of A-Z a-z 0-9 . _ -", tag)
		}
	}
	b, err := s.targetBuild(ctx, target)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = b.Template
	}
	if b.Template != name {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "build %s is of template %s, not %s: a tag points at a build of its own template", b.ID, b.Template, name)
	}
	t, err := s.template(ctx, name, true)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	for _, tag := range tags {
		t.Tags[tag] = store.TemplateTag{Build: b.ID, At: now}
	}
	t.UpdatedAt = now
	if err := s.store.PutTemplate(ctx, t); err != nil {
		return nil, err
	}
	s.changed(b.Template)
	return buildOf(b), nil
}

// RemoveTags removes tags of template name.
func (s *Service) RemoveTags(ctx context.Context, name string, tags []string) error {
	t, err := s.template(ctx, name, true)
	if err != nil {
		return err
	}
	for _, tag := range tags {
		if _, ok := t.Tags[tag]; !ok {
			return errdefs.New(errdefs.ErrNotFound, "template %s has no tag %q", name, tag)
		}
	}
	for _, tag := range tags {
		delete(t.Tags, tag)
	}
	t.UpdatedAt = time.Now().UTC()
	if err := s.store.PutTemplate(ctx, t); err != nil {
		return err
	}
	s.changed(name)
	return nil
}

// targetBuild is the ready build a "name:tag" or a build id names.
func (s *Service) targetBuild(ctx context.Context, target string) (*store.Build, error) {
	if b, err := s.build(ctx, target); err == nil {
		if b.State != store.BuildReady {
			return nil, errdefs.New(errdefs.ErrFailedPrecondition, "build %s is %s, not ready", b.ID, b.State)
		}
		return b, nil
	}
	name, tag, err := ParseRef(target)
	if err != nil {
		return nil, err
	}
	t, err := s.template(ctx, name, false)
	if err != nil {
		return nil, err
	}
	tt, ok := t.Tags[tag]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %s has no tag %q", name, tag)
	}
	return s.store.GetBuild(ctx, tt.Build)
}

// decodeConfig reads a build result's config.
func decodeConfig(raw json.RawMessage) recipe.Config {
	var c recipe.Config
	_ = json.Unmarshal(raw, &c)
	return c
}

// Active is how many builds are queued or running.
func (s *Service) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}
