// Package dockerfile reads a Dockerfile into a recipe with BuildKit's own
// parser (the one docker build uses), so that line continuations, escapes,
// quoting, heredocs and variable expansion behave as users know them. It
// maps FROM, RUN, COPY/ADD of local files, ENV, ARG, WORKDIR, USER, SHELL,
// CMD/ENTRYPOINT (the start command) and HEALTHCHECK/EXPOSE (its ready
// check), ignores what only describes an image (LABEL, MAINTAINER, VOLUME,
// STOPSIGNAL), and refuses the rest, naming the line.
package dockerfile

import (
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
)

// MaxSize bounds a Dockerfile.
const MaxSize = 1 << 20

// Options of a parse.
type Options struct {
	// Context is the sha256 of the uploaded build context, where COPY and
	// ADD take their files from ("" when the build has none).
	Context string
	// Args are build arguments (--build-arg), for ARG instructions.
	Args map[string]string
	// SourceEnv, if set, gives the environment of the image FROM names
	// (with its PATH), which later instructions expand $NAME against as
	// docker build does: ENV PATH=/x:$PATH keeps the image's PATH.
	SourceEnv func(from recipe.Source) (map[string]string, error)
}

// Parse reads the Dockerfile in r.
func Parse(r io.Reader, o Options) (*recipe.Recipe, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if len(data) > MaxSize {
		return nil, invalid(0, "the Dockerfile is larger than %d bytes", MaxSize)
	}
	res, err := parser.Parse(strings.NewReader(string(data)))
	if err != nil {
		return nil, invalid(0, "%v", err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, invalid(0, "%v", err)
	}
	switch {
	case len(stages) == 0:
		return nil, invalid(0, "the Dockerfile has no FROM")
	case len(stages) > 1:
		return nil, invalid(line(stages[1].Location), "multi-stage builds (a second FROM) are not supported")
	}
	c := &converter{
		lex:  shell.NewLex(res.EscapeToken),
		opts: o,
		args: map[string]string{},
		env:  map[string]string{},
		sh:   []string{"/bin/sh", "-c"},
	}
	// ARGs before FROM are in scope for FROM only.
	global := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			global[kv.Key] = c.argValue(kv)
		}
	}
	st := stages[0]
	from, _, err := c.lex.ProcessWord(st.BaseName, envGetter(global))
	if err != nil {
		return nil, invalid(line(st.Location), "FROM: %v", err)
	}
	if from == "" || strings.EqualFold(from, "scratch") {
		return nil, invalid(line(st.Location), "FROM scratch is not supported: a sandbox needs a shell and libc; start from an image or a template")
	}
	if st.Platform != "" {
		return nil, invalid(line(st.Location), "FROM --platform is not supported (templates are built for the host's platform)")
	}
	c.rec.From = recipe.Source{Image: from}
	if o.SourceEnv != nil {
		env, err := o.SourceEnv(c.rec.From)
		if err != nil {
			return nil, err
		}
		maps.Copy(c.env, env)
	}
	for _, cmd := range st.Commands {
		if err := c.command(cmd); err != nil {
			return nil, err
		}
	}
	c.finishStart()
	if err := c.rec.Validate(); err != nil {
		return nil, err
	}
	return &c.rec, nil
}

type converter struct {
	lex  *shell.Lex
	opts Options
	rec  recipe.Recipe
	// args are the ARGs in scope, env the ENV so far: both expand later
	// instructions; args also reach RUN commands as their environment.
	args map[string]string
	env  map[string]string
	sh   []string
	// The start command: ENTRYPOINT and CMD, each exec or shell form.
	entrypoint, cmd []string
	// The ready check: HEALTHCHECK's command, else the first EXPOSEd port.
	healthcheck string
	port        int
}

func (c *converter) argValue(kv instructions.KeyValuePairOptional) string {
	if v, ok := c.opts.Args[kv.Key]; ok {
		return v
	}
	if kv.Value != nil {
		return *kv.Value
	}
	return ""
}

// expand runs BuildKit's variable expansion over a command's words, with
// ENV winning over ARG as in docker build.
func (c *converter) expand(cmd instructions.Command) error {
	ex, ok := cmd.(instructions.SupportsSingleWordExpansion)
	if !ok {
		return nil
	}
	vars := maps.Clone(c.args)
	maps.Copy(vars, c.env)
	return ex.Expand(func(word string) (string, error) {
		out, _, err := c.lex.ProcessWord(word, envGetter(vars))
		return out, err
	})
}

func (c *converter) add(ln int, s recipe.Step) {
	s.Line = ln
	c.rec.Steps = append(c.rec.Steps, s)
}

func (c *converter) command(cmd instructions.Command) error {
	ln := line(cmd.Location())
	if err := c.expand(cmd); err != nil {
		return invalid(ln, "%s: %v", strings.ToUpper(cmd.Name()), err)
	}
	switch cmd := cmd.(type) {
	case *instructions.ArgCommand:
		for _, kv := range cmd.Args {
			c.args[kv.Key] = c.argValue(kv)
		}
	case *instructions.EnvCommand:
		var vars []recipe.EnvVar
		for _, kv := range cmd.Env {
			c.env[kv.Key] = kv.Value
			vars = append(vars, recipe.EnvVar{Name: kv.Key, Value: kv.Value})
		}
		c.add(ln, recipe.Step{Env: vars})
	case *instructions.WorkdirCommand:
		c.add(ln, recipe.Step{Workdir: cmd.Path})
	case *instructions.UserCommand:
		c.add(ln, recipe.Step{User: cmd.User})
	case *instructions.ShellCommand:
		c.sh = slices.Clone(cmd.Shell)
	case *instructions.RunCommand:
		return c.run(ln, cmd)
	case *instructions.CopyCommand:
		if cmd.From != "" {
			return invalid(ln, "COPY --from is not supported (multi-stage builds are not)")
		}
		if len(cmd.ExcludePatterns) > 0 || cmd.Parents {
			return invalid(ln, "COPY --exclude and --parents are not supported")
		}
		return c.copy(ln, "COPY", cmd.SourcesAndDest, cmd.Chown, cmd.Chmod)
	case *instructions.AddCommand:
		if cmd.Checksum != "" || cmd.KeepGitDir != nil || len(cmd.ExcludePatterns) > 0 {
			return invalid(ln, "ADD --checksum, --keep-git-dir and --exclude are not supported")
		}
		for _, src := range cmd.SourcePaths {
			switch {
			case strings.Contains(src, "://") || strings.HasPrefix(src, "git@"):
				return invalid(ln, "ADD of a URL (%s) is not supported: RUN curl or git in a step instead", src)
			case isArchive(src):
				return invalid(ln, "ADD of a local archive (%s) is not supported: it would be unpacked; COPY it and RUN tar instead", src)
			}
		}
		return c.copy(ln, "ADD", cmd.SourcesAndDest, cmd.Chown, cmd.Chmod)
	case *instructions.CmdCommand:
		c.cmd = c.cmdLine(cmd.ShellDependantCmdLine)
	case *instructions.EntrypointCommand:
		c.entrypoint = c.cmdLine(cmd.ShellDependantCmdLine)
		c.cmd = nil // as in docker build: a later ENTRYPOINT resets CMD
	case *instructions.HealthCheckCommand:
		if h := cmd.Health; h != nil && len(h.Test) > 1 {
			switch h.Test[0] {
			case "CMD-SHELL":
				c.healthcheck = h.Test[1]
			case "CMD":
				c.healthcheck = shellJoin(h.Test[1:])
			}
		}
	case *instructions.ExposeCommand:
		for _, p := range cmd.Ports {
			num, proto, _ := strings.Cut(p, "/")
			if n, err := strconv.Atoi(num); err == nil && c.port == 0 && (proto == "" || proto == "tcp") {
				c.port = n
			}
		}
	case *instructions.LabelCommand, *instructions.MaintainerCommand, *instructions.VolumeCommand, *instructions.StopSignalCommand:
		// They describe an image; a template has no use for them.
	case *instructions.OnbuildCommand:
		return invalid(ln, "ONBUILD is not supported")
	default:
		return invalid(ln, "%s is not supported", strings.ToUpper(cmd.Name()))
	}
	return nil
}

func (c *converter) run(ln int, cmd *instructions.RunCommand) error {
	for _, f := range cmd.FlagsUsed {
		return invalid(ln, "RUN --%s is not supported", f)
	}
	run := &recipe.Run{}
	switch {
	case len(cmd.Files) > 0:
		// A heredoc: RUN <<EOF ... EOF runs the document as a script.
		if len(cmd.Files) > 1 || len(cmd.CmdLine) != 1 || !strings.HasPrefix(strings.TrimSpace(cmd.CmdLine[0]), "<<") {
			return invalid(ln, "RUN with heredocs is supported only as RUN <<EOF (one document, nothing else on the line)")
		}
		run.Shell = cmd.Files[0].Data
	case cmd.PrependShell:
		run.Shell = strings.Join(cmd.CmdLine, " ")
		if !slices.Equal(c.sh, []string{"/bin/sh", "-c"}) {
			run.Shell, run.Argv = "", append(slices.Clone(c.sh), run.Shell)
		}
	default:
		run.Argv = slices.Clone(cmd.CmdLine)
	}
	if len(c.args) > 0 {
		run.Env = recipe.EnvFromMap(c.args)
	}
	c.add(ln, recipe.Step{Run: run})
	return nil
}

func (c *converter) copy(ln int, what string, sd instructions.SourcesAndDest, chown, chmod string) error {
	if len(sd.SourceContents) > 0 {
		return invalid(ln, "%s <<EOF (inline files) is not supported", what)
	}
	if c.opts.Context == "" {
		return invalid(ln, "%s needs a build context: upload one with the build", what)
	}
	if len(sd.SourcePaths) > 1 && !strings.HasSuffix(sd.DestPath, "/") {
		return invalid(ln, "%s with several sources needs a destination ending in /", what)
	}
	for _, src := range sd.SourcePaths {
		if _, err := recipe.CleanSource(src); err != nil {
			return invalid(ln, "%s", errdefs.PublicMessage(err))
		}
	}
	c.add(ln, recipe.Step{Copy: &recipe.Copy{
		Files: c.opts.Context, Src: slices.Clone(sd.SourcePaths), Dest: sd.DestPath,
		Owner: chown, Mode: chmod,
	}})
	return nil
}

// cmdLine is a CMD or ENTRYPOINT as argv: exec form as is, shell form
// through the shell.
func (c *converter) cmdLine(cl instructions.ShellDependantCmdLine) []string {
	if cl.PrependShell {
		return append(slices.Clone(c.sh), strings.Join(cl.CmdLine, " "))
	}
	return slices.Clone(cl.CmdLine)
}

// finishStart turns ENTRYPOINT and CMD into the start command (Docker's
// rule: ENTRYPOINT's argv followed by CMD's) and picks its ready check.
func (c *converter) finishStart() {
	argv := append(slices.Clone(c.entrypoint), c.cmd...)
	if len(argv) == 0 {
		return
	}
	start := &recipe.Start{Cmd: shellJoin(argv)}
	switch {
	case c.healthcheck != "":
		start.Ready.Cmd = c.healthcheck
	case c.port > 0:
		start.Ready.Port = c.port
	}
	c.rec.Start = start
}

// shellJoin quotes argv for /bin/sh -c.
func shellJoin(argv []string) string {
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		return argv[2]
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			parts[i] = a
		} else {
			parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(parts, " ")
}

func isArchive(src string) bool {
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"} {
		if strings.HasSuffix(strings.ToLower(path.Base(src)), ext) {
			return true
		}
	}
	return false
}

func line(r []parser.Range) int {
	if len(r) == 0 {
		return 0
	}
	return r[0].Start.Line
}

func invalid(ln int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if ln > 0 {
		msg = fmt.Sprintf("Dockerfile line %d: %s", ln, msg)
	} else {
		msg = "Dockerfile: " + msg
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
}

// envGetter is a map as BuildKit's shell lexer reads variables.
type envGetter map[string]string

func (e envGetter) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e envGetter) Keys() []string              { return slices.Sorted(maps.Keys(e)) }
