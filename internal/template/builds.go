package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// BuildRequest asks for a build of template Name ("name" or "name:tag").
type BuildRequest struct {
	Name string
	// Tags set to the build when it is ready, besides the one in Name
	// (none there and none here: "default").
	Tags   []string
	Recipe *recipe.Recipe
	// Auth is the registry credential of an image source (never stored).
	Auth *ociimage.Auth
	// CPU, MemoryMB, DiskMB: the build's sandboxes and the template's.
	CPU, MemoryMB, DiskMB int
	Network               *sandbox.NetworkPolicy
	// Origin is "e2b" for E2B API builds.
	Origin string
}

// limits of a request, checked.
func (r BuildRequest) limits(d runtime.Limits) (runtime.Limits, error) {
	l := runtime.Limits{CPUs: r.CPU, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB, MaxProcs: d.MaxProcs}
	for _, f := range []struct {
		name     string
		v        *int
		def      int
		min, max int
	}{
		{"cpu", &l.CPUs, d.CPUs, 1, 64},
		{"memory_mb", &l.MemoryMB, d.MemoryMB, 128, 65536},
		{"disk_mb", &l.DiskMB, d.DiskMB, 64, 1 << 20},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.min || *f.v > f.max {
			return l, errdefs.New(errdefs.ErrInvalidArgument, "%s must be between %d and %d", f.name, f.min, f.max)
		}
	}
	return l, nil
}

// pending holds what a requested build needs to run that is not stored:
// the resolved source (with registry credentials behind it).
type pending struct {
	src *source
}

// StartBuild checks a build request (its recipe, its uploaded files and
// its source: a registry image is looked up now, so a missing image or
// credential is the caller's error, not a failed build) and queues it.
func (s *Service) StartBuild(ctx context.Context, req BuildRequest) (*Build, error) {
	hold, err := s.reserve(ctx, req)
	if err != nil {
		return nil, err
	}
	b, err := s.newBuild(ctx, req, store.BuildQueued)
	if err != nil {
		hold()
		return nil, err
	}
	return s.submit(ctx, b, req, hold)
}

// reserve takes the build req asks for from its tenant's quotas before
// anything of it is made (a refused build leaves no record, and a waiting
// one stays waiting); the build gives it back when it ends.
func (s *Service) reserve(ctx context.Context, req BuildRequest) (release func(), err error) {
	limits, err := req.limits(s.cfg.Defaults)
	if err != nil {
		return nil, err
	}
	if s.cfg.ReserveBuild == nil {
		return func() {}, nil
	}
	return s.cfg.ReserveBuild(ctx, limits.CPUs, limits.MemoryMB)
}

// RequestBuild makes a build that waits for its recipe (E2B's first call);
// TriggerBuild gives it and queues it.
func (s *Service) RequestBuild(ctx context.Context, req BuildRequest) (*Build, error) {
	b, err := s.newBuild(ctx, req, store.BuildWaiting)
	if err != nil {
		return nil, err
	}
	return buildOf(b), nil
}

// TriggerBuild starts a waiting build with its recipe.
func (s *Service) TriggerBuild(ctx context.Context, id string, req BuildRequest) (*Build, error) {
	b, err := s.build(ctx, id)
	if err != nil {
		return nil, err
	}
	if b.State != store.BuildWaiting {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "build %s is %s, not waiting for its steps", id, b.State)
	}
	req.Name, req.CPU, req.MemoryMB, req.DiskMB, req.Origin = b.Template, b.CPU, b.MemoryMB, b.DiskMB, b.Origin
	if req.Network == nil {
		req.Network = sandbox.NetworkOf(b.Network)
	}
	hold, err := s.reserve(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.submit(ctx, b, req, hold)
}

func (s *Service) newBuild(ctx context.Context, req BuildRequest, state string) (*store.Build, error) {
	name, tag, err := ParseRef(req.Name)
	if err != nil {
		return nil, err
	}
	if name == BaseName {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "%q is the platform's template: build under another name", BaseName)
	}
	tags := []string{}
	if strings.Contains(req.Name, ":") {
		tags = append(tags, tag)
	}
	for _, t := range req.Tags {
		if !tagRE.MatchString(t) {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "tag %q is not valid: use 1-128 of A-Z a-z 0-9 . _ -", t)
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		tags = []string{DefaultTag}
	}
	limits, err := req.limits(s.cfg.Defaults)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	b := &store.Build{
		ID: uuid.NewString(), Tenant: tenant.FromContext(ctx).Tenant, Node: s.cfg.Node, Template: name, Tags: tags, State: state,
		CPU: limits.CPUs, MemoryMB: limits.MemoryMB, DiskMB: limits.DiskMB,
		Network: sandbox.NetworkRow(req.Network), Origin: req.Origin, CreatedAt: now,
	}
	if b.Network == nil {
		b.Network = sandbox.NetworkRow(s.cfg.Network)
	}
	// The template exists from its first build on (E2B hands out its id
	// at once); its tags point at builds only once they are ready.
	t, err := s.claimName(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		t, err = &store.Template{Name: name, Tenant: b.Tenant, Tags: map[string]store.TemplateTag{}, CreatedAt: now, UpdatedAt: now}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.store.PutBuild(ctx, b, t); err != nil {
		return nil, err
	}
	return b, nil
}

// RefuseBuild ends a waiting build whose steps could not be taken (E2B's
// steps that do not translate), so that it does not wait forever.
func (s *Service) RefuseBuild(ctx context.Context, id string, reason error) error {
	b, err := s.build(ctx, id)
	if err != nil {
		return err
	}
	if b.State != store.BuildWaiting {
		return errdefs.New(errdefs.ErrFailedPrecondition, "build %s is %s, not waiting for its steps", id, b.State)
	}
	s.refuse(ctx, b, reason)
	return nil
}

// refuse records b as failed before it ran, with reason's public message.
func (s *Service) refuse(ctx context.Context, b *store.Build, reason error) {
	b.State, b.FinishedAt = store.BuildError, time.Now().UTC()
	b.Error = &store.BuildErr{Message: errdefs.PublicMessage(reason)}
	if err := s.store.PutBuild(context.WithoutCancel(ctx), b, nil); err != nil {
		s.log.Warn("record refused build", "build", b.ID, "err", err)
	}
}

// submit validates the recipe, resolves its source and queues the build.
// What the build will use (its file sets, its source's layers) is pinned
// before it is looked up, until the build ends; hold, its share of its
// tenant's quotas, is released then too (or at once if it is refused).
// It returns the build as queued: from then on it is the running build's.
func (s *Service) submit(ctx context.Context, b *store.Build, req BuildRequest, hold func()) (*Build, error) {
	releases := []func(){hold}
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	fail := func(err error) (*Build, error) {
		release()
		s.refuse(ctx, b, err)
		return nil, err
	}
	r := req.Recipe
	if r == nil {
		return fail(errdefs.New(errdefs.ErrInvalidArgument, "the build has no recipe"))
	}
	if err := r.Validate(); err != nil {
		return fail(err)
	}
	if r.From.Archive != "" && hashRE.MatchString(r.From.Archive) {
		releases = append(releases, s.pins.pin(filesID(filesKey(ctx, r.From.Archive))))
	}
	for i, st := range r.Steps {
		if st.Copy == nil {
			continue
		}
		if hashRE.MatchString(st.Copy.Files) {
			releases = append(releases, s.pins.pin(filesID(filesKey(ctx, st.Copy.Files))))
		}
		if ok, err := s.HasFiles(ctx, st.Copy.Files); err != nil {
			return fail(err)
		} else if !ok {
			return fail(errdefs.New(errdefs.ErrInvalidArgument, "%s: no uploaded files with hash %s: upload them before the build", r.StepName(i), st.Copy.Files))
		}
	}
	src, err := s.resolveSource(ctx, r.From, req.Auth, b.Template)
	if err != nil {
		return fail(err)
	}
	releases = append(releases, s.pins.pin(s.chainNames(src.chain)...))
	if src.close != nil {
		releases = append(releases, src.close)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return fail(err)
	}
	// The node that runs the build is the one a restart or a loss of
	// fails it on (E2B's trigger may come to another node than the
	// request did).
	b.Node = s.cfg.Node
	b.Recipe, b.Steps, b.State = raw, len(r.Steps), store.BuildQueued
	for _, st := range r.Steps {
		if st.Layered() {
			b.Layered++
		}
	}
	if err := s.store.PutBuild(ctx, b, nil); err != nil {
		release()
		return nil, err
	}
	queued := buildOf(b)
	s.launch(b, r, src, release)
	return queued, nil
}

// DefaultPath is the PATH of a source that sets none: Docker's default,
// and what the agent gives commands.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SourceEnv is the environment a build that starts from from begins with:
// the source image's ENV, with DefaultPath when it sets no PATH. Dockerfile
// and E2B steps expand $NAME against it, as docker build does, so that
// ENV PATH=/opt/venv/bin:$PATH keeps the rest of the PATH. An uploaded
// archive is not unpacked for this: its steps see DefaultPath only.
func (s *Service) SourceEnv(ctx context.Context, from recipe.Source, auth *ociimage.Auth) (map[string]string, error) {
	env := map[string]string{}
	if from.Archive == "" {
		src, err := s.resolveSource(ctx, from, auth, "")
		if err != nil {
			return nil, err
		}
		env = src.config.EnvMap()
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = DefaultPath
	}
	return env, nil
}

// resolveSource finds what the recipe starts from.
func (s *Service) resolveSource(ctx context.Context, from recipe.Source, auth *ociimage.Auth, building string) (*source, error) {
	switch {
	case from.Template != "":
		return s.templateSource(ctx, from.Template, building)
	case from.Archive != "":
		file, err := s.art.filesPath(ctx, filesKey(ctx, from.Archive))
		if err != nil {
			return nil, err
		}
		scratch, err := os.MkdirTemp(s.art.work, "archive-")
		if err != nil {
			return nil, err
		}
		img, err := ociimage.FromArchive(file, scratch)
		if err == nil {
			err = s.checkImageSize("the uploaded image", img)
		}
		if err != nil {
			os.RemoveAll(scratch)
			return nil, err
		}
		src := ociSource("the uploaded image "+img.Digest, img)
		src.close = func() { os.RemoveAll(scratch) }
		return src, nil
	}
	// An image name that is a template of this node is that template: a
	// Dockerfile's FROM names either.
	if name, _, err := ParseRef(from.Image); err == nil && !strings.ContainsAny(from.Image, "/@") {
		if _, err := s.template(ctx, name, false); err == nil || name == BaseName {
			return s.templateSource(ctx, from.Image, building)
		}
	}
	if s.cfg.Puller == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "this node does not pull registry images")
	}
	img, err := s.cfg.Puller.Resolve(ctx, from.Image, auth)
	if err != nil {
		return nil, err
	}
	if err := s.checkImageSize(from.Image, img); err != nil {
		return nil, err
	}
	return ociSource(from.Image, img), nil
}

// checkImageSize refuses an image whose layers alone (compressed) are
// over the limit; one that unpacks past it is stopped as it does.
func (s *Service) checkImageSize(what string, img *ociimage.Image) error {
	if img.Bytes > s.cfg.MaxImage {
		return errdefs.New(errdefs.ErrTooLarge, "%s has %d bytes of compressed layers, more than the limit for images of %d bytes (SPACE_TEMPLATE_MAX_IMAGE): use a smaller image", what, img.Bytes, s.cfg.MaxImage)
	}
	return nil
}

func ociSource(what string, img *ociimage.Image) *source {
	key := recipe.SourceKey("oci", img.Digest)
	return &source{what: what, key: key, config: img.Config, chain: chain{layers: []string{key}}, oci: img}
}

// templateSource starts from another template's ready build.
func (s *Service) templateSource(ctx context.Context, ref, building string) (*source, error) {
	name, tag, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if name == building {
		// Allowed (a new version on top of the old), but only from a
		// ready build, which the lookup below requires anyway.
		s.log.Debug("template built from itself", "template", name, "tag", tag)
	}
	if name == BaseName {
		base, err := s.base()
		if err != nil {
			return nil, err
		}
		return &source{what: "base", key: recipe.SourceKey("base", base.recipe), config: base.config, chain: chain{base: base.image}}, nil
	}
	t, err := s.template(ctx, name, false)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "from: template %q not found", name)
	}
	tt, ok := t.Tags[tag]
	if !ok {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "from: template %s has no ready build tagged %q", name, tag)
	}
	b, err := s.store.GetBuild(ctx, tt.Build)
	if err != nil {
		return nil, err
	}
	if b.Result == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "from: build %s of %s has no result", b.ID, name)
	}
	src := &source{what: "template " + name + ":" + tag, key: b.Result.Key, config: decodeConfig(b.Result.Config),
		chain: chain{base: b.Result.Base, layers: slices.Clone(b.Result.Layers)}}
	var parent recipe.Recipe
	if json.Unmarshal(b.Recipe, &parent) == nil && parent.Start != nil {
		src.start = parent.Start
	}
	return src, nil
}

// launch runs a queued build in the background; release is called once
// it ended.
func (s *Service) launch(b *store.Build, r *recipe.Recipe, src *source, release func()) {
	// The build runs as its tenant: its file sets and layers are the
	// tenant's.
	ctx, cancel := context.WithCancelCause(tenant.NewContext(context.Background(), tenant.Principal{Tenant: tenant.Of(b.Tenant)}))
	l := s.buildLog(b.ID)
	if !s.track(b.ID, &active{cancel: cancel, log: l}) {
		cancel(errShutdown)
		release()
		return
	}
	go func() {
		defer s.wg.Done()
		defer release() // after the build's end is recorded
		defer cancel(nil)
		s.runBuild(ctx, b, r, src, l)
	}()
}

// track makes work id (a build, or a start taken again) active: Close
// cancels it and waits for it (the caller calls s.wg.Done at its end, and
// removes it from s.active). It is false, and nothing is tracked, once the
// service is closed.
func (s *Service) track(id string, a *active) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active[id] = a
	s.wg.Add(1)
	return true
}

// buildLimits are the limits of build b's sandboxes, and of the
// sandboxes made from it (0: the node's defaults).
func (s *Service) buildLimits(b *store.Build) runtime.Limits {
	return runtime.Limits{CPUs: b.CPU, MemoryMB: b.MemoryMB, DiskMB: b.DiskMB, MaxProcs: s.cfg.Defaults.MaxProcs}
}

// runBuild waits for a build slot, runs the build and records how it ended.
func (s *Service) runBuild(ctx context.Context, b *store.Build, r *recipe.Recipe, src *source, l *buildLog) {
	log := s.log.With("build", b.ID, "template", b.Template)
	defer func() {
		s.mu.Lock()
		delete(s.active, b.ID)
		s.mu.Unlock()
		l.finish()
	}()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		s.finish(ctx, b, nil, log)
		return
	}
	defer func() { <-s.slots }()
	bctx, cancel := context.WithTimeoutCause(ctx, s.cfg.BuildTimeout, timeoutErr(s.cfg.BuildTimeout))
	defer cancel()
	work, err := os.MkdirTemp(s.art.work, "build-")
	if err != nil {
		s.finish(ctx, b, err, log)
		return
	}
	defer os.RemoveAll(work)
	b.State, b.StartedAt = store.BuildBuilding, time.Now().UTC()
	if err := s.store.PutBuild(ctx, b, nil); err != nil {
		log.Warn("record build start", "err", err)
	}
	log.Info("build started", "steps", len(r.Steps))
	limits := s.buildLimits(b)
	run := &run{svc: s, b: *b, rec: r, src: src, log: l, work: work, limits: limits}
	defer run.unpin() // after finish: the tags moved, the collector sees them
	result, err := run.execute(bctx)
	b.Step, b.Cached = run.b.Step, run.b.Cached
	if err == nil {
		var use usage
		use.add(result.Layers, result.Start)
		result.Bytes = s.stored(ctx, use)
	}
	if err == nil && bctx.Err() != nil {
		err = context.Cause(bctx)
	}
	b.Result = result
	s.finish(bctx, b, err, log)
}

// finish records a build's end: ready (and its tags moved to it in the
// same transaction), failed, or canceled.
func (s *Service) finish(ctx context.Context, b *store.Build, err error, log *slog.Logger) {
	l := s.buildLog(b.ID)
	b.FinishedAt = time.Now().UTC()
	took := b.FinishedAt.Sub(b.CreatedAt).Round(time.Millisecond)
	var tpl *store.Template
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if cur, gerr := s.store.GetBuild(context.Background(), b.ID); gerr == nil && cur.Final() {
		// Ended by another node (this one was reported lost): that stands,
		// and no tag moves to what was made meanwhile.
		why := cur.State
		if cur.Error != nil {
			why = cur.Error.Message
		}
		l.add("error", cur.Step, "build ended by the cluster: %s", why)
		log.Warn("build ended by the cluster while it ran here", "state", cur.State)
		return
	}
	switch {
	case err == nil && b.Result != nil:
		b.State = store.BuildReady
		t, terr := s.store.GetTemplate(context.Background(), b.Template)
		if terr != nil {
			// Deleted while it built: the build stands, no name points at it.
			log.Warn("template gone before its build finished", "err", terr)
			break
		}
		for _, tag := range b.Tags {
			t.Tags[tag] = store.TemplateTag{Build: b.ID, At: b.FinishedAt}
		}
		t.UpdatedAt = b.FinishedAt
		tpl = t
		l.add("info", b.Steps+1, "build ready in %s (%d of %d RUN/COPY steps cached); tags %s", took, b.Cached, b.Layered, strings.Join(b.Tags, ", "))
	case errors.Is(err, errCanceled) || errors.Is(context.Cause(ctx), errCanceled):
		b.State = store.BuildCanceled
		b.Error = &store.BuildErr{Step: b.Step, Message: "canceled by request"}
		l.add("warn", b.Step, "build canceled")
	default:
		if err == nil {
			err = errors.New("the build made no image")
		}
		b.State = store.BuildError
		b.Error = buildError(err, b, l)
		l.add("error", b.Error.Step, "build failed: %s", b.Error.Message)
		// The build's log shows the user what may be shown; spaced's log
		// keeps the cause (an internal error's included).
		log.Warn("build failed", "step", b.Error.Step, "err", err)
	}
	if perr := s.store.PutBuild(context.Background(), b, tpl); perr != nil {
		log.Warn("record build end", "err", perr)
	}
	s.changed(b.Template)
	s.cfg.Metrics.ended(b.State, took.Seconds(), b.Layered, b.Cached)
	log.Info("build ended", "state", b.State, "took_ms", took.Milliseconds(), "cached", b.Cached, "steps", b.Steps)
}

// buildError is what a failed build reports: its step, message, exit code
// and the end of that step's log.
func buildError(err error, b *store.Build, l *buildLog) *store.BuildErr {
	out := &store.BuildErr{Step: b.Step, Message: errdefs.PublicMessage(err)}
	var se *stepErr
	if errors.As(err, &se) {
		out.Step, out.Message, out.ExitCode = se.step, se.msg, se.exitCode
	} else if errdefs.Class(err) == nil {
		out.Message = fmt.Sprintf("step %d: internal error", b.Step)
	}
	if errdefs.Class(err) == errdefs.ErrResourceExhausted {
		out.Message = errdefs.PublicMessage(err)
	}
	out.LogTail = l.tail(out.Step, 20)
	return out
}

// HasFiles reports whether file set hash was uploaded.
func (s *Service) HasFiles(ctx context.Context, hash string) (bool, error) {
	if !hashRE.MatchString(hash) {
		return false, errdefs.New(errdefs.ErrInvalidArgument, "file hash %q is not 64 lowercase hex digits", hash)
	}
	key := filesKey(ctx, hash)
	if _, err := os.Stat(filepath.Join(s.art.work, "files", key+".tar")); err == nil {
		return true, nil
	}
	return s.art.has(ctx, filesID(key))
}
