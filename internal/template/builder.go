package template

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// A build runs its recipe step by step. Each RUN and COPY runs in a
// sandbox of its own started from the image of the steps before it, and
// its writable layer becomes the step's layer: stored in the object store
// under the step's cache key and applied to a new image on this node. A
// step whose key is cached is not run again; the images of cached steps
// are made only when a later step needs them. At the end the start
// command (if any) runs and, once ready, its sandbox is checkpointed.

// source is what a build starts from, resolved when it is requested.
type source struct {
	what   string // for logs: "base", "python:3.12", "template app:v1"
	key    string
	config recipe.Config
	chain  chain
	// oci is a registry or archive image whose flattened layer may still
	// have to be stored (it is chain.Layers[0]).
	oci *ociimage.Image
	// close removes what reading the source needed (an unpacked archive).
	close func()
	// start is inherited from a template source with a start command.
	start *recipe.Start
}

// chain is how an image is made: layers applied on a base directory.
type chain struct {
	base   string
	layers []string
}

// run is one build in progress.
type run struct {
	svc    *Service
	b      store.Build
	rec    *recipe.Recipe
	src    *source
	log    *buildLog
	work   string
	limits runtime.Limits
	force  bool

	key    string
	config recipe.Config
	chain  chain
	ran    bool // a step ran (not every one was cached)
	// madeWorkdir is the working directory the image is known to have:
	// the source's, or one a step's layer made.
	madeWorkdir string
	pins        []func()
}

// stepErr is a failed step: what the build's error reports.
type stepErr struct {
	step     int
	msg      string
	exitCode *int
	cause    error
}

func (e *stepErr) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}
func (e *stepErr) Unwrap() error { return e.cause }

// pin holds names from the collector until the build ends.
func (r *run) pin(names ...string) {
	r.pins = append(r.pins, r.svc.pins.pin(names...))
}

func (r *run) unpin() {
	for _, release := range r.pins {
		release()
	}
}

// chainNames are the names the collector knows a chain's parts by: its
// base image, and each layer's stored artifact and image on this node.
func (s *Service) chainNames(c chain) []string {
	var out []string
	if c.base != "" {
		out = append(out, c.base)
	}
	for _, k := range c.layers {
		out = append(out, layerID(k), s.im.id(k))
	}
	return out
}

func (r *run) fail(step int, cause error, format string, args ...any) error {
	return &stepErr{step: step, msg: fmt.Sprintf(format, args...), cause: cause}
}

// execute runs the whole build and returns what it made.
func (r *run) execute(ctx context.Context) (*store.BuildImage, error) {
	n := len(r.rec.Steps)
	r.key, r.config, r.chain = r.src.key, r.src.config, r.src.chain
	r.madeWorkdir = r.config.Workdir
	if t := tenant.FromContext(ctx).Tenant; t != tenant.Default {
		r.key = recipe.TenantKey(r.key, t)
	}
	r.log.add("info", 0, "FROM %s", r.src.what)
	if err := r.storeSource(ctx); err != nil {
		return nil, r.fail(0, err, "source %s: %s", r.src.what, errdefs.PublicMessage(err))
	}
	for i, s := range r.rec.Steps {
		r.b.Step = i + 1
		r.svc.progress(r.b.ID, i+1, r.b.Cached)
		if err := r.step(ctx, i, s); err != nil {
			var se *stepErr
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, r.fail(i+1, err, "%s failed: %s", r.rec.StepName(i), errdefs.PublicMessage(err))
		}
	}
	final, err := r.svc.materialize(ctx, r.chain)
	if err != nil {
		return nil, r.fail(n+1, err, "making the template's image: %s", errdefs.PublicMessage(err))
	}
	start := r.rec.Start
	if start == nil {
		start = r.src.start
	}
	result := &store.BuildImage{Image: final.id, Key: r.key, Base: r.chain.base, Layers: r.chain.layers}
	result.Config, _ = json.Marshal(r.config)
	switch {
	case start != nil:
		skey, err := r.started(ctx, final, *start)
		if err != nil {
			return nil, err
		}
		result.Start = skey
		result.StartSpec, _ = json.Marshal(*start)
	case r.ran:
		if err := r.smoke(ctx, final); err != nil {
			return nil, err
		}
	}
	return result, nil
}

// storeSource makes sure a registry or archive source is in the object
// store as one layer (flattened), so that no node needs the registry again.
func (r *run) storeSource(ctx context.Context) error {
	if r.src.oci == nil {
		return nil
	}
	key := r.src.chain.layers[0]
	if ok, err := r.svc.art.has(ctx, layerID(key)); err != nil || ok {
		return err
	}
	r.log.add("info", 0, "pulling %s", r.src.what)
	tmp := filepath.Join(r.work, "source.tar")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = r.src.oci.Flatten(ctx, f, r.svc.cfg.MaxImage)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	st, _ := os.Stat(tmp)
	stored, err := r.svc.art.saveLayer(ctx, key, tmp)
	if err != nil {
		return err
	}
	r.log.add("info", 0, "stored the image as one layer (%s, %s compressed)", size(st.Size()), size(stored))
	return nil
}

func (r *run) step(ctx context.Context, i int, s recipe.Step) error {
	n := len(r.rec.Steps)
	label := fmt.Sprintf("[%d/%d] %s", i+1, n, firstLine(s.String(), 200))
	var plan *copyPlan
	digest := ""
	if !s.Layered() {
		r.config = r.config.Apply(s)
		// A WORKDIR no later step makes gets a layer of its own that
		// makes it, as a container build does.
		if i != lastWorkdir(r.rec.Steps) || r.config.Workdir == r.madeWorkdir {
			r.key = recipe.StepKey(r.key, s, "")
			r.log.add("info", i+1, "%s", label)
			return nil
		}
		digest = "mkdir"
	}
	if s.Copy != nil {
		files, err := r.svc.art.filesPath(ctx, filesKey(ctx, s.Copy.Files))
		if err != nil {
			return err
		}
		if plan, err = planCopy(files, s.Copy, r.config.Workdir, r.work, r.svc.copyBounds(r.b.Tenant)); err != nil {
			return err
		}
		defer plan.release()
		digest = plan.digest
	}
	key := recipe.StepKey(r.key, s, digest)
	// Pinned before the cache is asked: a layer found cached stays.
	r.pin(layerID(key), r.svc.im.id(key))
	r.force = r.force || s.Force
	if !r.force {
		// The stored layer decides, not an image on this node: a template
		// must be makeable on every node, and an image may outlive its
		// layer in the cache (made recently from an old one).
		cached, err := r.svc.art.has(ctx, layerID(key))
		if err != nil {
			return err
		}
		if cached {
			if s.Layered() { // a WORKDIR's layer is not counted
				r.log.cached(i+1, "%s (cached)", label)
				r.b.Cached++
			} else {
				r.log.add("info", i+1, "%s", label)
			}
			r.key, r.chain.layers = key, append(r.chain.layers, key)
			r.madeWorkdir = r.config.Workdir
			return nil
		}
	}
	r.log.add("info", i+1, "%s", label)
	r.ran = true
	parent, err := r.svc.materialize(ctx, r.chain)
	if err != nil {
		return err
	}
	box, err := r.box(ctx, parent, r.config)
	if err != nil {
		return err
	}
	defer box.Close(ctx)
	if err := r.ensureWorkdir(ctx, box); err != nil {
		return err
	}
	switch {
	case s.Run != nil:
		if err := r.runCommand(ctx, box, i+1, s); err != nil {
			return err
		}
	case s.Copy != nil:
		for _, p := range plan.parts {
			f, err := os.Open(p.tar)
			if err != nil {
				return err
			}
			err = box.Extract(ctx, p.dest, f, s.Copy.Owner, s.Copy.Mode, p.single)
			f.Close()
			os.Remove(p.tar)
			if err != nil {
				return err
			}
		}
	}
	return r.commit(ctx, box, i+1, key, parent)
}

// box boots a build sandbox on img with config.
func (r *run) box(ctx context.Context, img imageRef, config recipe.Config) (*sandbox.BuildBox, error) {
	return r.svc.boxes.StartBuildBox(ctx, sandbox.BuildBoxSpec{
		Build: r.b.ID, Template: r.b.Template, Image: img.id, Root: img.root,
		Limits: r.limits, Network: sandbox.NetworkOf(r.b.Network), Env: config.EnvMap(), User: config.User, Workdir: config.Workdir,
		Timeout: r.svc.cfg.BuildTimeout,
	})
}

// ensureWorkdir makes the working directory if the image lacks it, as a
// container build does (it becomes part of the step's layer).
func (r *run) ensureWorkdir(ctx context.Context, box *sandbox.BuildBox) error {
	wd := r.config.Workdir
	if wd == r.madeWorkdir || wd == "" || wd == "/" {
		return nil
	}
	var out bytes.Buffer
	code, err := box.Run(ctx, sandbox.Exec{Argv: []string{"/bin/sh", "-c", mkWorkdir, "mkworkdir", wd, r.config.User}, User: "root", Cwd: "/"},
		func(_ bool, b []byte) {
			if out.Len() < 4096 {
				out.Write(b)
			}
		})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return fmt.Errorf("make WORKDIR %s: %w", wd, err)
	}
	r.madeWorkdir = wd
	return nil
}

// lastWorkdir is the index of the last WORKDIR step that no RUN or COPY
// follows (-1 if none): the one whose directory needs a layer of its own.
func lastWorkdir(steps []recipe.Step) int {
	for i := len(steps) - 1; i >= 0; i-- {
		switch {
		case steps[i].Layered():
			return -1
		case steps[i].Workdir != "":
			return i
		}
	}
	return -1
}

// mkWorkdir makes the directory $1 if missing, as BuildKit's WORKDIR does:
// the directories it makes belong to the user $2 (the current USER, its
// group too when it names none; root when empty), existing ones are left
// as they are.
const mkWorkdir = `set -e
d=$1 u=$2 top= p=$1
while [ ! -e "$p" ]; do top=$p; p=$(dirname "$p"); done
[ -n "$top" ] || exit 0
mkdir -p "$d"
[ -n "$u" ] || exit 0
case $u in *:*) ;; *) g=$(id -g "$u") && u=$u:$g ;; esac
chown -R "$u" "$top"`

func (r *run) runCommand(ctx context.Context, box *sandbox.BuildBox, step int, s recipe.Step) error {
	argv := s.Run.Command()
	env := r.config.EnvMap()
	for _, e := range s.Run.Env {
		env[e.Name] = e.Value
	}
	lines := &lineWriter{emit: func(stderr bool, line string) {
		level := "info"
		if stderr {
			level = "warn"
		}
		r.log.add(level, step, "%s", line)
	}}
	code, err := box.Run(ctx, sandbox.Exec{Argv: argv, Env: env, User: s.Run.User, Cwd: r.config.Workdir}, lines.write)
	lines.flush()
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("run: %w", err)
	}
	if code != 0 {
		msg := fmt.Sprintf("%s failed: exit code %d", r.rec.StepName(step-1), code)
		if tail := strings.Join(r.log.tail(step, 20), "\n"); strings.Contains(strings.ToLower(tail), "no space left on device") {
			msg += fmt.Sprintf(" (the step ran out of disk: the build's sandboxes have %d MB; give the build more disk)", r.limits.DiskMB)
		}
		se := &stepErr{step: step, msg: msg}
		se.exitCode = &code
		return se
	}
	return nil
}

// commit turns what the step's sandbox changed into the step's layer:
// stored under key, and applied to a new image on this node.
func (r *run) commit(ctx context.Context, box *sandbox.BuildBox, step int, key string, parent imageRef) error {
	tmp := filepath.Join(r.work, "layer-"+key[:16]+".tar")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	capped := &capWriter{w: f, left: r.svc.cfg.MaxImage}
	err = box.ExportLayer(ctx, capped)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if capped.over {
		return errdefs.New(errdefs.ErrTooLarge, "the step's layer is larger than %d bytes, the limit for images (SPACE_TEMPLATE_MAX_IMAGE)", r.svc.cfg.MaxImage)
	}
	if err != nil {
		return err
	}
	box.Close(ctx) // the layer is out; free the sandbox before the upload
	st, _ := os.Stat(tmp)
	stored, err := r.svc.art.saveLayer(ctx, key, tmp)
	if err != nil {
		return err
	}
	if _, err := r.svc.im.derive(ctx, key, parent.id, parent.root, func() (io.ReadCloser, error) { return os.Open(tmp) }); err != nil {
		return err
	}
	r.log.add("debug", step, "layer %s: %s (%s stored)", key[:12], size(st.Size()), size(stored))
	r.key, r.chain.layers = key, append(r.chain.layers, key)
	return nil
}

// smoke boots the finished image once as its user and runs a command,
// so a template whose sandboxes cannot start (a USER that does not
// exist, no shell) fails its build rather than its users' creates.
func (r *run) smoke(ctx context.Context, img imageRef) error {
	n := len(r.rec.Steps)
	box, err := r.box(ctx, img, r.config)
	if err != nil {
		return r.fail(n+1, err, "the finished template does not start: %s", errdefs.PublicMessage(err))
	}
	defer box.Close(ctx)
	code, err := box.Run(ctx, sandbox.Exec{Argv: []string{"/bin/sh", "-c", "true"}, Cwd: r.config.Workdir}, nil)
	if err != nil || code != 0 {
		return r.fail(n+1, err, "the finished template cannot run a command as %q in %q (exit %d): %s", r.config.User, r.config.Workdir, code, errdefs.PublicMessage(err))
	}
	return nil
}

// firstLine shortens a step's text for its log line.
func firstLine(s string, max int) string {
	line, _, more := strings.Cut(s, "\n")
	if more || len(line) > max {
		if len(line) > max {
			line = line[:max]
		}
		return line + " ..."
	}
	return line
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// capWriter passes at most left bytes on, then fails (and says so).
type capWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errors.New("over the size limit")
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}

// lineWriter turns output chunks into log lines.
type lineWriter struct {
	buf  [2][]byte
	emit func(stderr bool, line string)
}

func (l *lineWriter) write(stderr bool, data []byte) {
	i := 0
	if stderr {
		i = 1
	}
	l.buf[i] = append(l.buf[i], data...)
	for {
		nl := strings.IndexByte(string(l.buf[i]), '\n')
		if nl < 0 {
			break
		}
		l.emit(stderr, strings.TrimRight(string(l.buf[i][:nl]), "\r"))
		l.buf[i] = l.buf[i][nl+1:]
	}
	if len(l.buf[i]) > maxLogLine {
		l.emit(stderr, string(l.buf[i]))
		l.buf[i] = nil
	}
}

func (l *lineWriter) flush() {
	for i, b := range l.buf {
		if len(b) > 0 {
			l.emit(i == 1, string(b))
		}
		l.buf[i] = nil
	}
}

// timeoutErr says a build ran out of time.
func timeoutErr(d time.Duration) error {
	return errdefs.New(errdefs.ErrResourceExhausted, "the build ran longer than its timeout (%s)", d)
}
