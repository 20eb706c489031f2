// Package recipe is what a template build makes: a source (another
// template, a registry image or an uploaded image archive), a list of steps
// (RUN, COPY, ENV, WORKDIR, USER) and optionally a start command with a
// ready check. Dockerfiles (package recipe/dockerfile), the native API and
// E2B's Template SDK are three ways to write one. A recipe is data: it says
// nothing of how a step runs (package template does that, inside sandboxes).
package recipe

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Recipe is one template build's input.
type Recipe struct {
	From  Source `json:"from"`
	Steps []Step `json:"steps,omitempty"`
	Start *Start `json:"start,omitempty"`
	// Prelude counts the first steps that are the platform's, not the
	// user's (what makes a registry image fit E2B's conventions): messages
	// call them setup steps and number the user's from 1 after them.
	Prelude int `json:"prelude,omitempty"`
}

// Source is what the first step builds on: exactly one field is set.
type Source struct {
	// Template is another template, "name" or "name:tag".
	Template string `json:"template,omitempty"`
	// Image is a registry image reference ("python:3.12-slim",
	// "registry.example.com/team/app@sha256:...").
	Image string `json:"image,omitempty"`
	// Archive is the sha256 of an uploaded `docker save` or OCI layout tar.
	Archive string `json:"archive,omitempty"`
}

// Step is one instruction; exactly one of Run, Copy, Env, Workdir, User is
// set.
type Step struct {
	Run     *Run     `json:"run,omitempty"`
	Copy    *Copy    `json:"copy,omitempty"`
	Env     []EnvVar `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	// Force runs the step even when its layer is cached (and every step
	// after it, whose parent then changes).
	Force bool `json:"force,omitempty"`
	// Line is where the step came from (a Dockerfile line), for errors.
	Line int `json:"line,omitempty"`
}

// Run runs a command: Shell through /bin/sh -c, or Argv as is.
type Run struct {
	Shell string   `json:"shell,omitempty"`
	Argv  []string `json:"argv,omitempty"`
	// User runs this command only as that user (else the current USER).
	User string `json:"user,omitempty"`
	// Env are variables only this command sees (a Dockerfile's ARGs).
	Env []EnvVar `json:"env,omitempty"`
	// Bash runs Shell with /bin/bash where the image has it (E2B's
	// commands are bash), else with /bin/sh.
	Bash bool `json:"bash,omitempty"`
}

// Command is how the command runs.
func (r *Run) Command() []string {
	switch {
	case r.Shell == "":
		return r.Argv
	case r.Bash:
		return []string{"/bin/sh", "-c", `if [ -x /bin/bash ]; then exec /bin/bash -c "$0"; else exec /bin/sh -c "$0"; fi`, r.Shell}
	}
	return []string{"/bin/sh", "-c", r.Shell}
}

// Copy copies files of an uploaded file set into the image.
type Copy struct {
	// Files is the sha256 of the uploaded tar (gzip or not) holding the
	// sources.
	Files string `json:"files"`
	// Src are paths in the file set; a path names a file or a whole
	// directory, and * ? [ ] match within one path element.
	Src  []string `json:"src"`
	Dest string   `json:"dest"`
	// Owner is "user[:group]" (names or numbers); empty is root.
	Owner string `json:"owner,omitempty"`
	// Mode, when set, is the octal mode of every copied file and directory.
	Mode string `json:"mode,omitempty"`
}

// EnvVar is one variable of an ENV step.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Start is the template's start command: it runs at the end of the build,
// and once Ready passes the running sandbox is checkpointed, so that every
// sandbox made from the template starts with it already running.
type Start struct {
	Cmd   string `json:"cmd"`
	Ready Ready  `json:"ready"`
}

// Ready says when a started template is ready: at most one of Cmd, Port,
// URL, File; none means "as soon as the command has started".
type Ready struct {
	// Cmd is ready when it exits 0 (run through /bin/sh -c).
	Cmd string `json:"cmd,omitempty"`
	// Port is ready when something listens on that TCP port.
	Port int `json:"port,omitempty"`
	// URL is ready when a GET of it (inside the sandbox) returns 200.
	URL string `json:"url,omitempty"`
	// File is ready when the file exists.
	File string `json:"file,omitempty"`
	// TimeoutSeconds bounds the wait (default 600, as E2B).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Kind names a step's instruction.
func (s Step) Kind() string {
	switch {
	case s.Run != nil:
		return "RUN"
	case s.Copy != nil:
		return "COPY"
	case s.Env != nil:
		return "ENV"
	case s.Workdir != "":
		return "WORKDIR"
	case s.User != "":
		return "USER"
	}
	return "?"
}

// Layered reports whether the step changes files (RUN, COPY) and so runs in
// a sandbox and makes a layer; ENV, WORKDIR and USER change only the config.
func (s Step) Layered() bool { return s.Run != nil || s.Copy != nil }

// String is the step as a user would write it, for logs.
func (s Step) String() string {
	switch {
	case s.Run != nil && s.Run.Shell != "":
		return "RUN " + s.Run.Shell
	case s.Run != nil:
		return "RUN " + strconv.Quote(strings.Join(s.Run.Argv, " "))
	case s.Copy != nil:
		return "COPY " + strings.Join(s.Copy.Src, " ") + " " + s.Copy.Dest
	case s.Env != nil:
		parts := make([]string, len(s.Env))
		for i, e := range s.Env {
			parts[i] = e.Name + "=" + strconv.Quote(e.Value)
		}
		return "ENV " + strings.Join(parts, " ")
	case s.Workdir != "":
		return "WORKDIR " + s.Workdir
	case s.User != "":
		return "USER " + s.User
	}
	return "?"
}

// Limits of a recipe.
const (
	MaxSteps        = 256
	maxCommandLen   = 64 << 10
	maxEnvValueLen  = 32 << 10
	maxSourcesCount = 1024
	maxPathLen      = 4096
	// DefaultReadyTimeout is how long a start command may take to be ready.
	DefaultReadyTimeout = 600
)

var (
	sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userSpec  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)
	imageRef  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@+-]{0,511}$`)
	// TemplateRef is "name" or "name:tag".
	TemplateRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}(:[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127})?$`)
)

// Validate checks everything that can be checked without running the
// recipe, and says which step is wrong (by number, and Dockerfile line).
func (r *Recipe) Validate() error {
	set := 0
	for _, v := range []string{r.From.Template, r.From.Image, r.From.Archive} {
		if v != "" {
			set++
		}
	}
	switch {
	case set != 1:
		return errdefs.New(errdefs.ErrInvalidArgument, "from: exactly one of template, image or archive is needed")
	case r.From.Template != "" && !TemplateRef.MatchString(r.From.Template):
		return errdefs.New(errdefs.ErrInvalidArgument, "from: template %q is not a valid name[:tag]", r.From.Template)
	case r.From.Image != "" && !imageRef.MatchString(r.From.Image):
		return errdefs.New(errdefs.ErrInvalidArgument, "from: image %q is not a valid image reference", r.From.Image)
	case r.From.Archive != "" && !sha256Hex.MatchString(r.From.Archive):
		return errdefs.New(errdefs.ErrInvalidArgument, "from: archive must be the sha256 (64 hex digits) of an uploaded file")
	case len(r.Steps) > MaxSteps:
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d steps", MaxSteps)
	case r.Prelude < 0 || r.Prelude > len(r.Steps):
		return errdefs.New(errdefs.ErrInvalidArgument, "prelude must count some of the steps")
	}
	for i, s := range r.Steps {
		if err := s.validate(); err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s: %s", r.StepName(i), errdefs.PublicMessage(err))
		}
	}
	if r.Start != nil {
		if err := r.Start.validate(); err != nil {
			return err
		}
	}
	return nil
}

// StepName is how errors and logs name step i (from 0): "step 3 (line 7,
// RUN)", counted from the first of the user's steps.
func (r *Recipe) StepName(i int) string {
	s := r.Steps[i]
	switch {
	case i < r.Prelude:
		return fmt.Sprintf("setup step %d (%s)", i+1, s.Kind())
	case s.Line > 0:
		return fmt.Sprintf("step %d (line %d, %s)", i+1-r.Prelude, s.Line, s.Kind())
	}
	return fmt.Sprintf("step %d (%s)", i+1-r.Prelude, s.Kind())
}

func invalid(format string, args ...any) error {
	return errdefs.New(errdefs.ErrInvalidArgument, format, args...)
}

func (s Step) validate() error {
	set := 0
	for _, b := range []bool{s.Run != nil, s.Copy != nil, s.Env != nil, s.Workdir != "", s.User != ""} {
		if b {
			set++
		}
	}
	if set != 1 {
		return invalid("exactly one of run, copy, env, workdir or user is needed")
	}
	switch {
	case s.Run != nil:
		r := s.Run
		if (r.Shell == "") == (len(r.Argv) == 0) {
			return invalid("a run step needs a shell command or an argv, not both")
		}
		if len(r.Shell) > maxCommandLen || len(strings.Join(r.Argv, " ")) > maxCommandLen {
			return invalid("the command is longer than %d bytes", maxCommandLen)
		}
		if strings.ContainsRune(r.Shell, 0) || slices.ContainsFunc(r.Argv, func(a string) bool { return strings.ContainsRune(a, 0) }) {
			return invalid("the command holds a NUL byte")
		}
		if r.User != "" && !userSpec.MatchString(r.User) {
			return invalid("user %q is not a valid user name", r.User)
		}
		if err := checkEnv(r.Env); err != nil {
			return err
		}
	case s.Copy != nil:
		c := s.Copy
		if !sha256Hex.MatchString(c.Files) {
			return invalid("copy: files must be the sha256 of an uploaded file set")
		}
		if len(c.Src) == 0 || len(c.Src) > maxSourcesCount {
			return invalid("copy: between 1 and %d sources", maxSourcesCount)
		}
		for _, src := range c.Src {
			if _, err := CleanSource(src); err != nil {
				return err
			}
		}
		if err := checkPath("copy: destination", c.Dest); err != nil {
			return err
		}
		if c.Owner != "" && !userSpec.MatchString(c.Owner) {
			return invalid("copy: owner %q is not user[:group]", c.Owner)
		}
		if c.Mode != "" {
			if m, err := strconv.ParseUint(c.Mode, 8, 32); err != nil || m > 0o7777 {
				return invalid("copy: mode %q is not an octal file mode", c.Mode)
			}
		}
	case s.Env != nil:
		if len(s.Env) == 0 {
			return invalid("env: at least one variable")
		}
		return checkEnv(s.Env)
	case s.Workdir != "":
		return checkPath("workdir", s.Workdir)
	case s.User != "":
		if !userSpec.MatchString(s.User) {
			return invalid("user %q is not user[:group]", s.User)
		}
	}
	return nil
}

func checkEnv(vars []EnvVar) error {
	if len(vars) > 256 {
		return invalid("env: at most 256 variables")
	}
	for _, e := range vars {
		if !envName.MatchString(e.Name) {
			return invalid("env: %q is not a valid variable name", e.Name)
		}
		if len(e.Value) > maxEnvValueLen || strings.ContainsRune(e.Value, 0) {
			return invalid("env: %s is longer than %d bytes or holds a NUL", e.Name, maxEnvValueLen)
		}
	}
	return nil
}

// checkPath accepts a path (a relative one is resolved against the working
// directory) of reasonable length without NULs.
func checkPath(what, p string) error {
	if p == "" || len(p) > maxPathLen || strings.ContainsRune(p, 0) {
		return invalid("%s %q is not a valid path", what, p)
	}
	return nil
}

// CleanSource is a COPY source as a clean path relative to the file set's
// root; it may not leave the root.
func CleanSource(src string) (string, error) {
	if src == "" || len(src) > maxPathLen || strings.ContainsRune(src, 0) {
		return "", invalid("copy: source %q is not a valid path", src)
	}
	c := path.Clean("/" + src)
	for _, part := range strings.Split(src, "/") {
		if part == ".." {
			return "", invalid("copy: source %q leaves the build context", src)
		}
	}
	if _, err := path.Match(c, ""); err != nil {
		return "", invalid("copy: source %q is not a valid pattern", src)
	}
	return strings.TrimPrefix(c, "/"), nil
}

func (s *Start) validate() error {
	if strings.TrimSpace(s.Cmd) == "" || len(s.Cmd) > maxCommandLen || strings.ContainsRune(s.Cmd, 0) {
		return invalid("start: cmd must be a non-empty command of at most %d bytes", maxCommandLen)
	}
	r := s.Ready
	set := 0
	for _, b := range []bool{r.Cmd != "", r.Port != 0, r.URL != "", r.File != ""} {
		if b {
			set++
		}
	}
	switch {
	case set > 1:
		return invalid("start: ready takes at most one of cmd, port, url, file")
	case r.Port < 0 || r.Port > 65535:
		return invalid("start: ready port %d is not a TCP port", r.Port)
	case r.URL != "" && !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://"):
		return invalid("start: ready url %q must be http:// or https://", r.URL)
	case r.File != "" && !path.IsAbs(r.File):
		return invalid("start: ready file %q must be an absolute path", r.File)
	case r.TimeoutSeconds < 0 || r.TimeoutSeconds > 3600:
		return invalid("start: ready timeout must be between 0 and 3600 seconds")
	case len(r.Cmd) > maxCommandLen || len(r.URL) > maxPathLen || strings.ContainsAny(r.Cmd+r.URL+r.File, "\x00"):
		return invalid("start: ready check is too long or holds a NUL")
	}
	return nil
}

// Timeout is how long the start command may take to be ready.
func (r Ready) Timeout() time.Duration {
	if r.TimeoutSeconds == 0 {
		return DefaultReadyTimeout * time.Second
	}
	return time.Duration(r.TimeoutSeconds) * time.Second
}

// Config is what the steps leave for the sandboxes made from an image: the
// environment, working directory and user of every command.
type Config struct {
	Env     []EnvVar `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
}

// EnvMap is the environment as a map.
func (c Config) EnvMap() map[string]string {
	m := make(map[string]string, len(c.Env))
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// Apply returns the config after step s: ENV sets (a later value
// replaces an earlier one in place), WORKDIR resolves against the current
// one, USER replaces the user.
func (c Config) Apply(s Step) Config {
	out := Config{Env: slices.Clone(c.Env), Workdir: c.Workdir, User: c.User}
	for _, e := range s.Env {
		i := slices.IndexFunc(out.Env, func(x EnvVar) bool { return x.Name == e.Name })
		if i >= 0 {
			out.Env[i] = e
		} else {
			out.Env = append(out.Env, e)
		}
	}
	if s.Workdir != "" {
		out.Workdir = ResolvePath(c.Workdir, s.Workdir)
	}
	if s.User != "" {
		out.User = s.User
	}
	return out
}

// ResolvePath resolves p against the working directory dir ("/" if empty).
func ResolvePath(dir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	if dir == "" {
		dir = "/"
	}
	return path.Join(dir, p)
}

// Equal reports whether two configs are the same.
func (c Config) Equal(o Config) bool {
	return c.Workdir == o.Workdir && c.User == o.User && slices.Equal(c.Env, o.Env)
}

// EnvFromMap turns a map into sorted variables (a map has no order).
func EnvFromMap(m map[string]string) []EnvVar {
	out := make([]EnvVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, EnvVar{Name: k, Value: m[k]})
	}
	return out
}
