package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/recipe/dockerfile"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
)

// Templates and their builds: uploads of build contexts (content-addressed
// file sets), builds from steps or a Dockerfile, their logs as SSE, tags.

type buildRequest struct {
	// Name is "name" or "name:tag".
	Name string   `json:"name"`
	Tags []string `json:"tags"`
	// Either a Dockerfile (with build args) ...
	Dockerfile string            `json:"dockerfile"`
	BuildArgs  map[string]string `json:"build_args"`
	// ... or a source, steps and a start command.
	From  *fromJSON  `json:"from"`
	Steps []stepJSON `json:"steps"`
	Start *startJSON `json:"start"`
	// Context is the hash of an uploaded file set COPY steps take files
	// from (PUT /v1/files/{hash}).
	Context  string       `json:"context"`
	NoCache  bool         `json:"no_cache"`
	CPU      int          `json:"cpu"`
	MemoryMB int          `json:"memory_mb"`
	DiskMB   int          `json:"disk_mb"`
	Network  *networkJSON `json:"network"`
}

type fromJSON struct {
	Template string        `json:"template"`
	Image    string        `json:"image"`
	Archive  string        `json:"archive"`
	Registry *registryJSON `json:"registry"`
}

type registryJSON struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// stepJSON is one step: exactly one of run (with user), argv, copy, env,
// workdir, user.
type stepJSON struct {
	Run     string            `json:"run"`
	Argv    []string          `json:"argv"`
	User    string            `json:"user"`
	Copy    *copyJSON         `json:"copy"`
	Env     map[string]string `json:"env"`
	Workdir string            `json:"workdir"`
	// NoCache runs the step (and the ones after it) even if cached.
	NoCache bool `json:"no_cache"`
}

type copyJSON struct {
	Src   stringList `json:"src"`
	Dest  string     `json:"dest"`
	Owner string     `json:"owner"`
	Mode  string     `json:"mode"`
	// Files is the file set to copy from (default: the build's context).
	Files string `json:"files"`
}

// stringList takes "a" or ["a", "b"].
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "copy src must be a string or a list of strings")
	}
	*s = many
	return nil
}

type startJSON struct {
	Cmd   string       `json:"cmd"`
	Ready recipe.Ready `json:"ready"`
}

// recipe turns the request into a recipe; sourceEnv gives the environment
// of the image a Dockerfile starts from.
func (b *buildRequest) recipe(sourceEnv func(recipe.Source, *ociimage.Auth) (map[string]string, error)) (*recipe.Recipe, *ociimage.Auth, error) {
	var auth *ociimage.Auth
	if b.From != nil && b.From.Registry != nil {
		auth = &ociimage.Auth{Username: b.From.Registry.Username, Password: b.From.Registry.Password}
	}
	if b.Dockerfile != "" {
		if b.From != nil && (b.From.Template != "" || b.From.Image != "" || b.From.Archive != "") || len(b.Steps) > 0 || b.Start != nil {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "give either a dockerfile or from/steps/start, not both")
		}
		r, err := dockerfile.Parse(strings.NewReader(b.Dockerfile), dockerfile.Options{
			Context: b.Context, Args: b.BuildArgs,
			SourceEnv: func(from recipe.Source) (map[string]string, error) { return sourceEnv(from, auth) },
		})
		if err != nil {
			return nil, nil, err
		}
		if b.NoCache && len(r.Steps) > 0 {
			r.Steps[0].Force = true
		}
		return r, auth, nil
	}
	if b.From == nil {
		return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "a build needs a dockerfile or a from")
	}
	r := &recipe.Recipe{From: recipe.Source{Template: b.From.Template, Image: b.From.Image, Archive: b.From.Archive}}
	for i, s := range b.Steps {
		st, err := s.step(b.Context)
		if err != nil {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "step %d: %s", i+1, errdefs.PublicMessage(err))
		}
		st.Force = s.NoCache || (b.NoCache && i == 0)
		r.Steps = append(r.Steps, st)
	}
	if b.Start != nil {
		r.Start = &recipe.Start{Cmd: b.Start.Cmd, Ready: b.Start.Ready}
	}
	return r, auth, nil
}

func (s stepJSON) step(context string) (recipe.Step, error) {
	switch {
	case s.Run != "" || len(s.Argv) > 0:
		return recipe.Step{Run: &recipe.Run{Shell: s.Run, Argv: s.Argv, User: s.User}}, nil
	case s.Copy != nil:
		files := s.Copy.Files
		if files == "" {
			files = context
		}
		if files == "" {
			return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "copy needs the build's context or its own files")
		}
		return recipe.Step{Copy: &recipe.Copy{Files: files, Src: s.Copy.Src, Dest: s.Copy.Dest, Owner: s.Copy.Owner, Mode: s.Copy.Mode}}, nil
	case len(s.Env) > 0:
		return recipe.Step{Env: recipe.EnvFromMap(s.Env)}, nil
	case s.Workdir != "":
		return recipe.Step{Workdir: s.Workdir}, nil
	case s.User != "":
		return recipe.Step{User: s.User}, nil
	}
	return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "a step needs one of run, argv, copy, env, workdir or user")
}

type buildJSON struct {
	ID         string        `json:"id"`
	Template   string        `json:"template"`
	Tags       []string      `json:"tags"`
	State      string        `json:"state"`
	Step       int           `json:"step"`
	Steps      int           `json:"steps"`
	Layered    int           `json:"layered"`
	Cached     int           `json:"cached"`
	CPU        int           `json:"cpu"`
	MemoryMB   int           `json:"memory_mb"`
	DiskMB     int           `json:"disk_mb"`
	CreatedAt  time.Time     `json:"created_at"`
	StartedAt  *time.Time    `json:"started_at,omitempty"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
	Error      *buildErrJSON `json:"error,omitempty"`
	Image      string        `json:"image,omitempty"`
	Bytes      int64         `json:"bytes,omitempty"`
	Started    bool          `json:"started,omitempty"`
}

type buildErrJSON struct {
	Step     int      `json:"step"`
	Message  string   `json:"message"`
	ExitCode *int     `json:"exit_code,omitempty"`
	LogTail  []string `json:"log_tail,omitempty"`
}

func toBuildJSON(b *store.Build) buildJSON {
	out := buildJSON{ID: b.ID, Template: b.Template, Tags: b.Tags, State: b.State, Step: b.Step, Steps: b.Steps, Layered: b.Layered, Cached: b.Cached,
		CPU: b.CPU, MemoryMB: b.MemoryMB, DiskMB: b.DiskMB, CreatedAt: b.CreatedAt}
	if !b.StartedAt.IsZero() {
		out.StartedAt = &b.StartedAt
	}
	if !b.FinishedAt.IsZero() {
		out.FinishedAt = &b.FinishedAt
	}
	if e := b.Error; e != nil {
		out.Error = &buildErrJSON{Step: e.Step, Message: e.Message, ExitCode: e.ExitCode, LogTail: e.LogTail}
	}
	if r := b.Result; r != nil {
		out.Image, out.Bytes, out.Started = r.Image, r.Bytes, r.Start != ""
	}
	return out
}

func (s *Server) StartBuild(w http.ResponseWriter, r *http.Request) {
	var req buildRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.CPU < 0 || req.MemoryMB < 0 || req.DiskMB < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "limits must not be negative"))
		return
	}
	rec, auth, err := req.recipe(func(from recipe.Source, auth *ociimage.Auth) (map[string]string, error) {
		return s.templates.SourceEnv(r.Context(), from, auth)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	// A new template counts against the tenant's templates quota, every
	// build against its template_mb.
	name, _, _ := template.ParseRef(req.Name)
	var b *store.Build
	err = s.tenants.AdmitTemplate(r.Context(), name, func() (err error) {
		b, err = s.templates.StartBuild(r.Context(), template.BuildRequest{
			Name: req.Name, Tags: req.Tags, Recipe: rec, Auth: auth,
			CPU: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Network: req.Network.policy(),
		})
		return err
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, toBuildJSON(b))
}

func (s *Server) ListBuilds(w http.ResponseWriter, r *http.Request, params native.ListBuildsParams) {
	builds, err := s.templates.Builds(r.Context(), r.URL.Query().Get("template"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]buildJSON, 0, len(builds))
	for _, b := range builds {
		out = append(out, toBuildJSON(b))
	}
	writeJSON(w, http.StatusOK, map[string]any{"builds": out})
}

func (s *Server) GetBuild(w http.ResponseWriter, r *http.Request, id string) {
	b, err := s.templates.Build(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBuildJSON(b))
}

func (s *Server) CancelBuild(w http.ResponseWriter, r *http.Request, id string) {
	b, err := s.templates.CancelBuild(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBuildJSON(b))
}

// buildLogs streams a build's log as SSE: "log" events (id = seq+1, so a
// client resumes with Last-Event-ID), then one "end" event with the
// build's final state.
func (s *Server) BuildLogs(w http.ResponseWriter, r *http.Request, id string, params native.BuildLogsParams) {
	after, err := lastEventID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if _, _, _, err := s.templates.Logs(r.Context(), id, 0, 1); err != nil {
		writeError(w, r, err)
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	offset := int(after)
	for {
		entries, done, changed, err := s.templates.Logs(r.Context(), id, offset, 500)
		if err != nil {
			return
		}
		for _, e := range entries {
			data, _ := json.Marshal(e)
			if sse.Event(uint64(e.Seq)+1, "log", data) != nil {
				return
			}
		}
		offset += len(entries)
		if done && len(entries) == 0 {
			b, err := s.templates.Build(r.Context(), id)
			if err == nil {
				data, _ := json.Marshal(toBuildJSON(b))
				sse.Event(0, "end", data)
			}
			return
		}
		if len(entries) > 0 {
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-time.After(time.Second): // state changes without a log line
		}
	}
}

// lastEventID reads Last-Event-ID (0 when absent).
func lastEventID(r *http.Request) (uint64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "Last-Event-ID %q is not a number", v)
	}
	return n, nil
}

type templateJSON struct {
	Name       string    `json:"name"`
	Builtin    bool      `json:"builtin,omitempty"`
	Tags       []tagJSON `json:"tags"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Bytes      int64     `json:"bytes"`
	LocalBytes int64     `json:"local_bytes"`
	Sandboxes  int       `json:"sandboxes"`
}

type tagJSON struct {
	Tag   string    `json:"tag"`
	Build string    `json:"build,omitempty"`
	At    time.Time `json:"at,omitzero"`
	Image string    `json:"image,omitempty"`
}

func toTemplateJSON(t *template.TemplateInfo) templateJSON {
	out := templateJSON{Name: t.Name, Builtin: t.Builtin, Tags: []tagJSON{}, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Bytes: t.Bytes, LocalBytes: t.LocalBytes, Sandboxes: t.Sandboxes}
	for _, tag := range t.Tags {
		out.Tags = append(out.Tags, tagJSON{Tag: tag.Tag, Build: tag.Build, At: tag.At, Image: tag.Image})
	}
	return out
}

func (s *Server) ListTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.templates.Templates(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]templateJSON, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTemplateJSON(t))
	}
	writeJSON(w, http.StatusOK, map[string]any{"templates": out})
}

func (s *Server) GetTemplate(w http.ResponseWriter, r *http.Request, name string) {
	t, err := s.templates.Template(r.Context(), name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toTemplateJSON(t))
}

func (s *Server) DeleteTemplate(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.templates.DeleteTemplate(r.Context(), name); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setTag points a tag at a build: {"build": "<id>"} or {"from": "name:tag"}.
func (s *Server) SetTag(w http.ResponseWriter, r *http.Request, name string, tag string) {
	var req struct {
		Build string `json:"build"`
		From  string `json:"from"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	target := req.Build
	if target == "" && req.From != "" {
		target = req.From
	}
	if target == "" || (req.Build != "" && req.From != "") {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "give either build or from"))
		return
	}
	if _, err := s.templates.SetTags(r.Context(), name, target, []string{tag}); err != nil {
		writeError(w, r, err)
		return
	}
	s.GetTemplate(w, r, name)
}

func (s *Server) DeleteTag(w http.ResponseWriter, r *http.Request, name string, tag string) {
	if err := s.templates.RemoveTags(r.Context(), name, []string{tag}); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// putFiles stores an uploaded file set (tar or tar.gz) under the SHA-256
// of its bytes.
func (s *Server) PutFiles(w http.ResponseWriter, r *http.Request, hash string) {
	present, err := s.templates.HasFiles(r.Context(), hash)
	if err == nil && !present {
		err = s.templates.PutFiles(r.Context(), hash, r.Body, true, s.maxUpload)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	code := http.StatusCreated
	if present {
		code = http.StatusOK
	}
	writeJSON(w, code, map[string]any{"hash": hash, "present": true})
}

func (s *Server) GetFiles(w http.ResponseWriter, r *http.Request, hash string) {
	present, err := s.templates.HasFiles(r.Context(), hash)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !present {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no uploaded files with hash %s", hash))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"hash": hash, "present": true})
}
