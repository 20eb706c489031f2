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
	"github.com/spacesandbox/space/internal/template"
)

// Templates and their builds: uploads of build contexts (content-addressed
// file sets), builds from steps or a Dockerfile, their logs as SSE, tags.

// buildRecipe turns a build request into a recipe; sourceEnv gives the
// environment of the image a Dockerfile starts from.
func buildRecipe(b *native.BuildRequest, sourceEnv func(recipe.Source, *ociimage.Auth) (map[string]string, error)) (*recipe.Recipe, *ociimage.Auth, error) {
	var auth *ociimage.Auth
	if b.From != nil && b.From.Registry != nil {
		auth = &ociimage.Auth{Username: deref(b.From.Registry.Username), Password: deref(b.From.Registry.Password)}
	}
	steps, ctx, noCache := deref(b.Steps), deref(b.Context), deref(b.NoCache)
	if df := deref(b.Dockerfile); df != "" {
		if b.From != nil && (deref(b.From.Template) != "" || deref(b.From.Image) != "" || deref(b.From.Archive) != "") || len(steps) > 0 || b.Start != nil {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "give either a dockerfile or from/steps/start, not both")
		}
		r, err := dockerfile.Parse(strings.NewReader(df), dockerfile.Options{
			Context: ctx, Args: deref(b.BuildArgs),
			SourceEnv: func(from recipe.Source) (map[string]string, error) { return sourceEnv(from, auth) },
		})
		if err != nil {
			return nil, nil, err
		}
		if noCache && len(r.Steps) > 0 {
			r.Steps[0].Force = true
		}
		return r, auth, nil
	}
	if b.From == nil {
		return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "a build needs a dockerfile or a from")
	}
	r := &recipe.Recipe{From: recipe.Source{Template: deref(b.From.Template), Image: deref(b.From.Image), Archive: deref(b.From.Archive)}}
	for i, s := range steps {
		st, err := buildStep(s, ctx)
		if err != nil {
			return nil, nil, errdefs.New(errdefs.ErrInvalidArgument, "step %d: %s", i+1, errdefs.PublicMessage(err))
		}
		st.Force = deref(s.NoCache) || (noCache && i == 0)
		r.Steps = append(r.Steps, st)
	}
	if st := b.Start; st != nil {
		r.Start = &recipe.Start{Cmd: st.Cmd}
		if rd := st.Ready; rd != nil {
			r.Start.Ready = recipe.Ready{Cmd: deref(rd.Cmd), Port: deref(rd.Port), URL: deref(rd.Url), File: deref(rd.File), TimeoutSeconds: deref(rd.TimeoutSeconds)}
		}
	}
	return r, auth, nil
}

// buildStep is one step: exactly one of run (with user), argv, copy, env,
// workdir, user.
func buildStep(s native.BuildStep, context string) (recipe.Step, error) {
	run, argv, user := deref(s.Run), deref(s.Argv), deref(s.User)
	switch {
	case run != "" || len(argv) > 0:
		return recipe.Step{Run: &recipe.Run{Shell: run, Argv: argv, User: user}}, nil
	case s.Copy != nil:
		files := deref(s.Copy.Files)
		if files == "" {
			files = context
		}
		if files == "" {
			return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "copy needs the build's context or its own files")
		}
		src, err := copySources(s.Copy.Src)
		if err != nil {
			return recipe.Step{}, err
		}
		return recipe.Step{Copy: &recipe.Copy{Files: files, Src: src, Dest: s.Copy.Dest, Owner: deref(s.Copy.Owner), Mode: deref(s.Copy.Mode)}}, nil
	case len(deref(s.Env)) > 0:
		return recipe.Step{Env: recipe.EnvFromMap(deref(s.Env))}, nil
	case deref(s.Workdir) != "":
		return recipe.Step{Workdir: deref(s.Workdir)}, nil
	case user != "":
		return recipe.Step{User: user}, nil
	}
	return recipe.Step{}, errdefs.New(errdefs.ErrInvalidArgument, "a step needs one of run, argv, copy, env, workdir or user")
}

// copySources reads a copy step's src: "a" or ["a", "b"].
func copySources(src native.BuildRequest_Steps_Copy_Src) ([]string, error) {
	if one, err := src.AsBuildRequestStepsCopySrc0(); err == nil {
		return []string{one}, nil
	}
	many, err := src.AsBuildRequestStepsCopySrc1()
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "copy src must be a string or a list of strings")
	}
	return many, nil
}

func toBuildJSON(b *template.Build) native.Build {
	out := native.Build{Id: ptr(b.ID), Template: ptr(b.Template), Tags: ptr(b.Tags), State: ptr(native.BuildState(b.State)), Step: ptr(b.Step), Steps: ptr(b.Steps),
		Layered: ptr(b.Layered), Cached: ptr(b.Cached), Cpu: ptr(b.CPU), MemoryMb: ptr(b.MemoryMB), DiskMb: ptr(b.DiskMB), CreatedAt: ptr(b.CreatedAt)}
	if !b.StartedAt.IsZero() {
		out.StartedAt = ptr(b.StartedAt)
	}
	if !b.FinishedAt.IsZero() {
		out.FinishedAt = ptr(b.FinishedAt)
	}
	if e := b.Error; e != nil {
		out.Error = &native.BuildError{Step: ptr(e.Step), Message: ptr(e.Message), ExitCode: e.ExitCode, LogTail: optSlice(e.LogTail)}
	}
	if r := b.Result; r != nil {
		out.Image, out.Bytes, out.Started = opt(r.Image), opt(r.Bytes), opt(r.Started)
	}
	return out
}

func (s *Server) StartBuild(w http.ResponseWriter, r *http.Request) {
	var req native.BuildRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if deref(req.Cpu) < 0 || deref(req.MemoryMb) < 0 || deref(req.DiskMb) < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "limits must not be negative"))
		return
	}
	rec, auth, err := buildRecipe(&req, func(from recipe.Source, auth *ociimage.Auth) (map[string]string, error) {
		return s.templates.SourceEnv(r.Context(), from, auth)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	// A new template counts against the tenant's templates quota, every
	// build against its template_mb.
	name, _, _ := template.ParseRef(req.Name)
	var b *template.Build
	err = s.tenants.AdmitTemplate(r.Context(), name, func() (err error) {
		b, err = s.templates.StartBuild(r.Context(), template.BuildRequest{
			Name: req.Name, Tags: deref(req.Tags), Recipe: rec, Auth: auth,
			CPU: deref(req.Cpu), MemoryMB: deref(req.MemoryMb), DiskMB: deref(req.DiskMb), Network: policyOf(req.Network),
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
	out := make([]native.Build, 0, len(builds))
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
			data, _ := json.Marshal(native.BuildLogEntry{Seq: e.Seq, Time: e.Time, Level: native.BuildLogEntryLevel(e.Level), Step: e.Step, Message: e.Message, Cached: opt(e.Cached)})
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

func toTemplateJSON(t *template.TemplateInfo) native.Template {
	tags := []native.TemplateTag{}
	for _, tag := range t.Tags {
		tags = append(tags, native.TemplateTag{Tag: ptr(tag.Tag), Build: opt(tag.Build), At: opt(tag.At), Image: opt(tag.Image)})
	}
	return native.Template{Name: ptr(t.Name), Builtin: opt(t.Builtin), Tags: &tags, CreatedAt: ptr(t.CreatedAt), UpdatedAt: ptr(t.UpdatedAt),
		Bytes: ptr(t.Bytes), LocalBytes: ptr(t.LocalBytes), Sandboxes: ptr(t.Sandboxes)}
}

func (s *Server) ListTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.templates.Templates(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]native.Template, 0, len(ts))
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
	var req native.SetTagJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	build, from := deref(req.Build), deref(req.From)
	target := build
	if target == "" && from != "" {
		target = from
	}
	if target == "" || (build != "" && from != "") {
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
	writeJSON(w, code, native.FileSet{Hash: ptr(hash), Present: ptr(true)})
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
	writeJSON(w, http.StatusOK, native.FileSet{Hash: ptr(hash), Present: ptr(true)})
}
