package e2bcompat

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/httpjson"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
)

// E2B's Template SDK (v2) builds in four calls: request a build (which
// makes the template), get an upload link per COPY's file set, start the
// build with its steps, and poll its status with log offsets. The steps
// are E2B's instructions (RUN, COPY, ENV, WORKDIR, USER) on a source image
// or template; they become a recipe that spaced builds like any other.
// A template's id here is its name. docs/e2b.md has the wire details.

// Templates is what the E2B layer needs of the template service.
type Templates interface {
	RequestBuild(ctx context.Context, req template.BuildRequest) (*template.Build, error)
	TriggerBuild(ctx context.Context, id string, req template.BuildRequest) (*template.Build, error)
	RefuseBuild(ctx context.Context, id string, reason error) error
	SourceEnv(ctx context.Context, from recipe.Source, auth *ociimage.Auth) (map[string]string, error)
	Build(ctx context.Context, id string) (*template.Build, error)
	Builds(ctx context.Context, name string) ([]*template.Build, error)
	Logs(ctx context.Context, id string, offset, limit int) ([]template.LogEntry, bool, <-chan struct{}, error)
	Template(ctx context.Context, name string) (*template.TemplateInfo, error)
	Templates(ctx context.Context) ([]*template.TemplateInfo, error)
	DeleteTemplate(ctx context.Context, name string) error
	SetTags(ctx context.Context, name, target string, tags []string) (*template.Build, error)
	RemoveTags(ctx context.Context, name string, tags []string) error
	HasFiles(ctx context.Context, hash string) (bool, error)
	PutFiles(ctx context.Context, hash string, body io.Reader, verify bool, max int64) error
}

// E2B's defaults for a template's sandboxes (its docs and older SDKs).
const (
	e2bDefaultCPU      = 2
	e2bDefaultMemoryMB = 1024
)

// uploadTTL is how long an upload link works.
const uploadTTL = time.Hour

type templateRequestJSON struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      int      `json:"cpuCount"`
	MemoryMB      int      `json:"memoryMB"`
	MinFreeDiskMB int      `json:"minFreeDiskMb"`
}

type templateRequestedJSON struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
}

// requestTemplateBuild is POST /v3/templates (and /v2/templates): a new
// build of the template named, waiting for its steps.
func (s *Server) requestTemplateBuild(w http.ResponseWriter, r *http.Request) {
	var req templateRequestJSON
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	if req.CPUCount < 0 || req.MemoryMB < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "cpuCount and memoryMB must not be negative"))
		return
	}
	if req.CPUCount == 0 {
		req.CPUCount = e2bDefaultCPU
	}
	if req.MemoryMB == 0 {
		req.MemoryMB = e2bDefaultMemoryMB
	}
	// A new template counts against the tenant's templates quota, every
	// build against its template_mb.
	ref := e2bRef(req.Name)
	name, _, _ := template.ParseRef(ref)
	var b *template.Build
	err := s.opts.Tenants.AdmitTemplate(r.Context(), name, func() (err error) {
		b, err = s.opts.Templates.RequestBuild(r.Context(), template.BuildRequest{
			Name: ref, Tags: e2bTags(req.Tags), CPU: req.CPUCount, MemoryMB: req.MemoryMB, Origin: "e2b",
		})
		return err
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, templateRequestedJSON{
		TemplateID: b.Template, BuildID: b.ID, Names: []string{b.Template}, Tags: b.Tags, Aliases: []string{b.Template},
	})
}

type uploadLinkJSON struct {
	Present bool   `json:"present"`
	URL     string `json:"url,omitempty"`
}

// filesLink is GET /templates/{id}/files/{hash}: whether the file set is
// stored, and a link to upload it (always given: an SDK asked to force
// the upload uses it even when present).
func (s *Server) filesLink(w http.ResponseWriter, r *http.Request) {
	id, hash := r.PathValue("id"), r.PathValue("hash")
	if _, err := s.opts.Templates.Template(r.Context(), id); err != nil {
		writeError(w, r, err)
		return
	}
	present, err := s.opts.Templates.HasFiles(r.Context(), hash)
	if err != nil {
		writeError(w, r, err)
		return
	}
	exp := strconv.FormatInt(time.Now().Add(uploadTTL).Unix(), 10)
	// The link uploads into the caller's tenant's file sets.
	t := tenant.FromContext(r.Context()).Tenant
	q := url.Values{"expires": {exp}, "tenant": {t}, "signature": {s.uploadSignature(id, hash, exp, t)}}
	link := fmt.Sprintf("%s/templates/%s/files/%s/upload?%s", baseURL(r), url.PathEscape(id), hash, q.Encode())
	writeJSON(w, http.StatusCreated, uploadLinkJSON{Present: present, URL: link})
}

// uploadFiles is the upload link: PUT with the file set as the body. The
// SDKs send no API key there; the link's signature (spaced's own secret,
// over the template, the hash, the expiry and the tenant) is the authority.
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request) {
	id, hash := r.PathValue("id"), r.PathValue("hash")
	q := r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > exp {
		writeStatus(w, http.StatusForbidden, "the upload link expired: ask for a new one")
		return
	}
	want := s.uploadSignature(id, hash, q.Get("expires"), q.Get("tenant"))
	if !hmac.Equal([]byte(want), []byte(q.Get("signature"))) {
		writeStatus(w, http.StatusForbidden, "the upload link's signature is not valid")
		return
	}
	p := tenant.Principal{Tenant: tenant.Of(q.Get("tenant")), Key: UploadLinkKey}
	tenant.RunsAs(r.Context(), p)
	ctx := tenant.NewContext(r.Context(), p)
	if err := s.opts.Templates.PutFiles(ctx, hash, r.Body, false, s.opts.MaxUpload); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// UploadLinkKey is what audit lines name a signed upload link by.
const UploadLinkKey = "upload-link"

func (s *Server) uploadSignature(id, hash, exp, tenant string) string {
	m := hmac.New(sha256.New, s.uploadKey)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%s", id, hash, exp, tenant)
	return hex.EncodeToString(m.Sum(nil))
}

func newUploadKey() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// baseURL is how the client reached spaced.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type buildStartJSON struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry *registryJSON   `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []buildStepJSON `json:"steps"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
}

type registryJSON struct {
	Type     string `json:"type"`
	Username string `json:"username"`
	Password string `json:"password"`
}

type buildStepJSON struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force"`
	FilesHash string   `json:"filesHash"`
}

// startTemplateBuild is POST /v2/templates/{id}/builds/{buildID}: the
// build's steps, translated to a recipe and queued.
func (s *Server) startTemplateBuild(w http.ResponseWriter, r *http.Request) {
	var req buildStartJSON
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	b, err := s.opts.Templates.Build(r.Context(), r.PathValue("build"))
	if err != nil || b.Template != r.PathValue("id") {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "build %s of template %s not found", r.PathValue("build"), r.PathValue("id")))
		return
	}
	rec, auth, err := e2bRecipe(req, func(from recipe.Source, auth *ociimage.Auth) (map[string]string, error) {
		return s.opts.Templates.SourceEnv(r.Context(), from, auth)
	})
	if err != nil {
		// The build ends refused (the SDK polls its status next).
		if ferr := s.opts.Templates.RefuseBuild(r.Context(), b.ID, err); ferr != nil {
			httpjson.LoggerOf(r.Context()).WarnContext(r.Context(), "e2b: record a refused build", "build", b.ID, "err", ferr)
		}
		writeError(w, r, err)
		return
	}
	err = s.opts.Tenants.AdmitTemplate(r.Context(), b.Template, func() error {
		_, err := s.opts.Templates.TriggerBuild(r.Context(), b.ID, template.BuildRequest{Recipe: rec, Auth: auth})
		return err
	})
	if errdefs.Class(err) == errdefs.ErrQuotaExceeded {
		// Refused before it ran: the build ends so (the SDK polls next).
		if ferr := s.opts.Templates.RefuseBuild(r.Context(), b.ID, err); ferr != nil {
			httpjson.LoggerOf(r.Context()).WarnContext(r.Context(), "e2b: record a refused build", "build", b.ID, "err", ferr)
		}
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// provision gives an image the conventions of E2B's templates: an account
// "user" (made if the image lacks it, with passwordless sudo where sudo
// exists), commands as "user" in /home/user unless steps say otherwise.
const provision = `set -e
if ! id user >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then useradd -m -s /bin/sh user
  elif command -v adduser >/dev/null 2>&1; then adduser -D user
  else
    echo 'user:x:1000:1000::/home/user:/bin/sh' >> /etc/passwd
    echo 'user:x:1000:' >> /etc/group
    mkdir -p /home/user && chown 1000:1000 /home/user
  fi
fi
if [ -d /etc/sudoers.d ]; then echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user && chmod 0440 /etc/sudoers.d/user; fi
mkdir -p /home/user && chown user /home/user`

var (
	waitForPort = regexp.MustCompile(`^\[ -n "\$\(ss -Htuln sport = :([0-9]{1,5})\)" \]$`)
	waitForURL  = regexp.MustCompile(`^curl -s -o /dev/null -w "%\{http_code\}" (\S+) \| grep -q "200"$`)
)

// e2bRecipe translates E2B's build steps; sourceEnv gives the environment
// of the image or template they start from, which set_envs values expand
// against.
func e2bRecipe(req buildStartJSON, sourceEnv func(recipe.Source, *ociimage.Auth) (map[string]string, error)) (*recipe.Recipe, *ociimage.Auth, error) {
	rec := &recipe.Recipe{}
	var auth *ociimage.Auth
	user := "user"
	switch {
	case req.FromTemplate != "" && req.FromImage != "":
		return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "give fromImage or fromTemplate, not both")
	case req.FromTemplate != "":
		rec.From.Template = e2bRef(req.FromTemplate)
	case isE2BBaseImage(req.FromImage):
		// from_base_image(): E2B's own base image stands for this spaced's
		// base template, which has its conventions already; no registry is
		// asked (Docker Hub may be out of reach, and the image is E2B's
		// rootfs, not one spaced's sandboxes were made for).
		rec.From.Template = baseTemplate
		// E2B's image runs as user in /home/user; the base template sets no
		// WORKDIR (a relative COPY would land under /).
		rec.Steps = append(rec.Steps, recipe.Step{User: "user"}, recipe.Step{Workdir: "/home/user"})
		rec.Prelude = len(rec.Steps)
	case req.FromImage != "":
		rec.From.Image = req.FromImage
		if reg := req.FromImageRegistry; reg != nil {
			if reg.Type != "" && reg.Type != "registry" {
				return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "fromImageRegistry type %q is not supported by spaced: use type registry (a username and password; for ECR or GAR an access token as the password)", reg.Type)
			}
			auth = &ociimage.Auth{Username: reg.Username, Password: reg.Password}
		}
		rec.Steps = append(rec.Steps,
			recipe.Step{Run: &recipe.Run{Shell: provision, User: "root"}},
			recipe.Step{User: "user"}, recipe.Step{Workdir: "/home/user"})
		rec.Prelude = len(rec.Steps)
	default:
		return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "give fromImage or fromTemplate")
	}
	env, err := sourceEnv(rec.From, auth)
	if err != nil {
		return nil, nil, err
	}
	for i, st := range req.Steps {
		step, err := e2bStep(st, &user, env)
		if err != nil {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "step %d (%s): %s", i+1, st.Type, errdefs.PublicMessage(err))
		}
		step.Force = st.Force
		rec.Steps = append(rec.Steps, step)
	}
	if req.Force && len(rec.Steps) > 0 {
		rec.Steps[0].Force = true
	}
	switch {
	case req.StartCmd != "":
		rec.Start = &recipe.Start{Cmd: req.StartCmd, Ready: e2bReady(req.ReadyCmd)}
	case req.ReadyCmd != "":
		// A ready check with no start command: E2B waits for it at the end
		// of the build, and so does a last step here.
		rec.Steps = append(rec.Steps, recipe.Step{Run: &recipe.Run{Shell: readyLoop(req.ReadyCmd), Bash: true}})
	}
	return rec, auth, nil
}

func e2bStep(st buildStepJSON, user *string, env map[string]string) (recipe.Step, error) {
	args := st.Args
	need := func(n int) error {
		if len(args) < n {
			return errdefs.New(errdefs.ErrInvalidArgument, "wants at least %d args", n)
		}
		return nil
	}
	switch strings.ToUpper(st.Type) {
	case "RUN":
		if err := need(1); err != nil {
			return recipe.Step{}, err
		}
		run := &recipe.Run{Shell: args[0], Bash: true}
		if len(args) > 1 {
			run.User = args[1]
		}
		return recipe.Step{Run: run}, nil
	case "COPY":
		if err := need(2); err != nil {
			return recipe.Step{}, err
		}
		c := &recipe.Copy{Files: st.FilesHash, Src: []string{args[0]}, Dest: args[1], Owner: *user}
		if len(args) > 2 && args[2] != "" {
			c.Owner = args[2]
		}
		if len(args) > 3 {
			c.Mode = args[3]
		}
		return recipe.Step{Copy: c}, nil
	case "ENV":
		if len(args) == 0 || len(args)%2 != 0 {
			return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "wants name and value pairs")
		}
		var vars []recipe.EnvVar
		for i := 0; i < len(args); i += 2 {
			// E2B evaluates values in a shell: $NAME refers to earlier ones.
			v := os.Expand(args[i+1], func(k string) string { return env[k] })
			env[args[i]] = v
			vars = append(vars, recipe.EnvVar{Name: args[i], Value: v})
		}
		return recipe.Step{Env: vars}, nil
	case "WORKDIR":
		if err := need(1); err != nil {
			return recipe.Step{}, err
		}
		return recipe.Step{Workdir: args[0]}, nil
	case "USER":
		if err := need(1); err != nil {
			return recipe.Step{}, err
		}
		*user = args[0]
		return recipe.Step{User: args[0]}, nil
	}
	return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "step type %q is not one of RUN, COPY, ENV, WORKDIR, USER", st.Type)
}

// readyWait bounds a ready check that ends a build without a start command.
const readyWait = 120

// readyLoop runs cmd every second until it succeeds, for up to readyWait
// seconds.
func readyLoop(cmd string) string {
	return fmt.Sprintf("for i in $(seq %d); do if (\n%s\n); then exit 0; fi; sleep 1; done\necho 'the ready command did not succeed within %d s' >&2; exit 1", readyWait, cmd, readyWait)
}

// e2bReady turns the SDK's ready helpers that need tools an image may lack
// (ss for a port, curl for a URL) into spaced's own checks; any other
// command stays a command.
func e2bReady(cmd string) recipe.Ready {
	if m := waitForPort.FindStringSubmatch(cmd); m != nil {
		port, _ := strconv.Atoi(m[1])
		return recipe.Ready{Port: port}
	}
	if m := waitForURL.FindStringSubmatch(cmd); m != nil {
		return recipe.Ready{URL: strings.Trim(m[1], `'"`)}
	}
	return recipe.Ready{Cmd: cmd}
}

type logEntryJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

type buildStatusJSON struct {
	TemplateID string         `json:"templateID"`
	BuildID    string         `json:"buildID"`
	Status     string         `json:"status"`
	Logs       []string       `json:"logs"`
	LogEntries []logEntryJSON `json:"logEntries"`
	Reason     *reasonJSON    `json:"reason,omitempty"`
}

type reasonJSON struct {
	Message    string         `json:"message"`
	Step       string         `json:"step,omitempty"`
	LogEntries []logEntryJSON `json:"logEntries,omitempty"`
}

// buildStatus is GET /templates/{id}/builds/{build}/status: the state and
// the log from logsOffset (at most 100 entries; the SDKs poll until a
// finished build's log runs dry).
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	b, err := s.opts.Templates.Build(r.Context(), r.PathValue("build"))
	if err != nil || b.Template != r.PathValue("id") {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "build %s of template %s not found", r.PathValue("build"), r.PathValue("id")))
		return
	}
	q := r.URL.Query()
	offset, _ := strconv.Atoi(q.Get("logsOffset"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	entries, _, _, err := s.opts.Templates.Logs(r.Context(), b.ID, max(offset, 0), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := buildStatusJSON{TemplateID: b.Template, BuildID: b.ID, Status: e2bBuildStatus(b.State), Logs: []string{}, LogEntries: []logEntryJSON{}}
	steps := stepsOf(b)
	for _, e := range entries {
		out.LogEntries = append(out.LogEntries, e2bLogEntry(e, steps))
	}
	if b.Error != nil && (b.State == template.BuildError || b.State == template.BuildCanceled) {
		reason := &reasonJSON{Message: b.Error.Message, Step: steps.label(b.Error.Step)}
		for _, line := range b.Error.LogTail {
			reason.LogEntries = append(reason.LogEntries, logEntryJSON{Timestamp: b.FinishedAt, Level: "error", Message: line, Step: reason.Step})
		}
		out.Reason = reason
	}
	writeJSON(w, http.StatusOK, out)
}

func e2bBuildStatus(state template.BuildState) string {
	switch state {
	case template.BuildWaiting:
		return "waiting"
	case template.BuildReady:
		return "ready"
	case template.BuildError, template.BuildCanceled:
		return "error"
	}
	return "building"
}

func e2bLogEntry(e template.LogEntry, steps stepNumbers) logEntryJSON {
	level := e.Level
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, level) {
		level = "info"
	}
	return logEntryJSON{Timestamp: e.Time, Level: level, Message: e.Message, Step: steps.label(e.Step)}
}

// stepNumbers maps a build's step numbers to the SDK's: the steps spaced
// put before the user's (provisioning an image) count as the base.
type stepNumbers struct{ before, steps int }

func stepsOf(b *template.Build) stepNumbers {
	return stepNumbers{before: b.Prelude, steps: b.Steps}
}

// label names a log step as E2B does: base, 1..n, finalize.
func (n stepNumbers) label(step int) string {
	switch {
	case step <= n.before:
		return "base"
	case step > n.steps:
		return "finalize"
	}
	return strconv.Itoa(step - n.before)
}

// aliasOrTags serves GET /templates/aliases/{alias} and
// GET /templates/{id}/tags, which one pattern must hold.
func (s *Server) aliasOrTags(w http.ResponseWriter, r *http.Request) {
	switch a, b := r.PathValue("a"), r.PathValue("b"); {
	case a == "aliases":
		s.aliasExists(w, r, b)
	case b == "tags":
		s.templateTags(w, r, a)
	default:
		writeStatus(w, http.StatusNotFound, "no E2B route for "+r.Method+" "+r.URL.Path)
	}
}

// aliasExists is GET /templates/aliases/{alias}.
func (s *Server) aliasExists(w http.ResponseWriter, r *http.Request, alias string) {
	name, _, _ := strings.Cut(strings.ToLower(alias), ":")
	if _, err := s.opts.Templates.Template(r.Context(), name); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": false})
}

// assignTags is POST /templates/tags.
func (s *Server) assignTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	b, err := s.opts.Templates.SetTags(r.Context(), "", e2bRef(req.Target), e2bTags(req.Tags))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": b.ID, "tags": e2bTags(req.Tags)})
}

// removeTags is DELETE /templates/tags; the default tag stays (as E2B).
func (s *Server) removeTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	tags := e2bTags(req.Tags)
	if slices.Contains(tags, template.DefaultTag) {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "the %s tag cannot be removed", template.DefaultTag))
		return
	}
	if err := s.opts.Templates.RemoveTags(r.Context(), e2bRef(req.Name), tags); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type tagJSON struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// templateTags is GET /templates/{id}/tags.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request, id string) {
	t, err := s.opts.Templates.Template(r.Context(), strings.ToLower(id))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []tagJSON{}
	for _, tag := range t.Tags {
		if tag.Build != "" {
			out = append(out, tagJSON{Tag: tag.Tag, BuildID: tag.Build, CreatedAt: tag.At})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate is DELETE /templates/{id}.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Templates.DeleteTemplate(r.Context(), strings.ToLower(r.PathValue("id"))); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type templateJSON struct {
	TemplateID    string    `json:"templateID"`
	BuildID       string    `json:"buildID"`
	CPUCount      int       `json:"cpuCount"`
	MemoryMB      int       `json:"memoryMB"`
	DiskSizeMB    int       `json:"diskSizeMB"`
	Public        bool      `json:"public"`
	Aliases       []string  `json:"aliases"`
	Names         []string  `json:"names"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	SpawnCount    int       `json:"spawnCount"`
	BuildCount    int       `json:"buildCount"`
	EnvdVersion   string    `json:"envdVersion"`
	BuildStatus   string    `json:"buildStatus"`
	LastSpawnedAt *string   `json:"lastSpawnedAt"`
}

// listTemplates is GET /templates.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.opts.Templates.Templates(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []templateJSON{}
	for _, t := range ts {
		var builds []*template.Build
		if !t.Builtin {
			if builds, err = s.opts.Templates.Builds(r.Context(), t.Name); err != nil {
				writeError(w, r, err)
				return
			}
		}
		out = append(out, e2bTemplate(t, builds))
	}
	writeJSON(w, http.StatusOK, out)
}

// noBuild is the buildID E2B lists for a template with no ready build.
const noBuild = "00000000-0000-0000-0000-000000000000"

// e2bTemplate is a template as E2B lists it, given the builds of it the
// caller may see (newest first): its buildID, cpu and memory are those of
// the ready build its default tag points at (none: zero), and its
// buildStatus is the state of the newest build meant for the default tag,
// ready or not ("waiting" when there is none), as E2B's own listing has
// it. Of a platform template another tenant sees no builds: ready when
// its default tag points at one. The base template has no builds and is
// always ready.
func e2bTemplate(t *template.TemplateInfo, builds []*template.Build) templateJSON {
	tj := templateJSON{TemplateID: t.Name, Aliases: []string{t.Name}, Names: []string{t.Name}, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		EnvdVersion: EnvdVersion, BuildID: noBuild, BuildStatus: "waiting", BuildCount: len(builds)}
	if t.Builtin {
		tj.BuildStatus, tj.CPUCount, tj.MemoryMB = "ready", e2bDefaultCPU, e2bDefaultMemoryMB
		return tj
	}
	for _, tag := range t.Tags {
		if tag.Tag != template.DefaultTag || tag.Build == "" {
			continue
		}
		tj.BuildID, tj.BuildStatus = tag.Build, "ready"
		for _, b := range builds {
			if b.ID == tag.Build {
				tj.BuildID, tj.CPUCount, tj.MemoryMB, tj.DiskSizeMB = b.ID, b.CPU, b.MemoryMB, b.DiskMB
			}
		}
	}
	for _, b := range builds {
		if slices.Contains(b.Tags, template.DefaultTag) {
			tj.BuildStatus = e2bBuildStatus(b.State)
			break
		}
	}
	return tj
}

// e2bRef is a template name with an optional tag as E2B reads it
// (id.ParseTemplateIDOrAliasWithTag): trimmed, name and tag lower-cased.
// baseTemplate is the template E2B's base image (e2bdev/base) builds from.
const baseTemplate = "base"

// isE2BBaseImage says whether ref names E2B's base image, e2bdev/base with
// any tag, as the SDKs' from_base_image() sends it or as written out with
// Docker Hub's name.
func isE2BBaseImage(ref string) bool {
	ref = strings.ToLower(strings.TrimSpace(ref))
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		ref = strings.TrimPrefix(ref, p)
	}
	name, _, _ := strings.Cut(ref, "@")
	name, _, _ = strings.Cut(name, ":")
	return name == "e2bdev/base"
}

func e2bRef(ref string) string {
	name, tag, hasTag := strings.Cut(strings.TrimSpace(ref), ":")
	name = strings.ToLower(strings.TrimSpace(name))
	if !hasTag {
		return name
	}
	return name + ":" + strings.ToLower(strings.TrimSpace(tag))
}

// e2bTags are tags as E2B reads them (id.ValidateAndDeduplicateTags):
// trimmed, lower-cased, each once.
func e2bTags(tags []string) []string {
	var out []string
	for _, t := range tags {
		t = strings.ToLower(strings.TrimSpace(t))
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
