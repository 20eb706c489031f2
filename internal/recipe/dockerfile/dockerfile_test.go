package dockerfile

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
)

const ctx = "1111111111111111111111111111111111111111111111111111111111111111"

func TestParseEverySupportedInstruction(t *testing.T) {
	df := `# syntax=docker/dockerfile:1
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG VERSION=1.0
LABEL maintainer=me
ENV APP_HOME=/srv/app PORT=8080
ENV GREETING hello world
WORKDIR $APP_HOME
COPY --chown=user:user --chmod=0644 requirements.txt ./
ADD app/ /srv/app/app/
RUN apt-get update && \
    apt-get install -y curl
RUN ["echo", "exec form"]
RUN <<EOF
echo one
echo two
EOF
USER nobody
EXPOSE 8080/tcp
HEALTHCHECK CMD curl -f http://localhost:8080/
CMD ["python", "-m", "http.server", "${PORT}"]
`
	got, err := Parse(strings.NewReader(df), Options{Context: ctx, Args: map[string]string{"VERSION": "2.0"}})
	if err != nil {
		t.Fatal(err)
	}
	want := recipe.Recipe{
		From: recipe.Source{Image: "python:3.12-slim"},
		Steps: []recipe.Step{
			{Line: 6, Env: []recipe.EnvVar{{Name: "APP_HOME", Value: "/srv/app"}, {Name: "PORT", Value: "8080"}}},
			{Line: 7, Env: []recipe.EnvVar{{Name: "GREETING", Value: "hello world"}}},
			{Line: 8, Workdir: "/srv/app"},
			{Line: 9, Copy: &recipe.Copy{Files: ctx, Src: []string{"requirements.txt"}, Dest: "./", Owner: "user:user", Mode: "0644"}},
			{Line: 10, Copy: &recipe.Copy{Files: ctx, Src: []string{"app/"}, Dest: "/srv/app/app/"}},
			{Line: 11, Run: &recipe.Run{Shell: "apt-get update &&     apt-get install -y curl", Env: []recipe.EnvVar{{Name: "VERSION", Value: "2.0"}}}},
			{Line: 13, Run: &recipe.Run{Argv: []string{"echo", "exec form"}, Env: []recipe.EnvVar{{Name: "VERSION", Value: "2.0"}}}},
			{Line: 14, Run: &recipe.Run{Shell: "echo one\necho two\n", Env: []recipe.EnvVar{{Name: "VERSION", Value: "2.0"}}}},
			{Line: 18, User: "nobody"},
		},
		// CMD is not expanded by Docker either: the shell never sees it.
		Start: &recipe.Start{Cmd: "python -m http.server '${PORT}'", Ready: recipe.Ready{Cmd: "curl -f http://localhost:8080/"}},
	}
	gj, _ := json.MarshalIndent(got, "", " ")
	wj, _ := json.MarshalIndent(want, "", " ")
	if string(gj) != string(wj) {
		t.Errorf("got\n%s\nwant\n%s", gj, wj)
	}
}

func TestParseStartCommand(t *testing.T) {
	for _, tc := range []struct {
		name, df string
		want     *recipe.Start
	}{
		{"none", "FROM base\nRUN true\n", nil},
		{"shell form, exposed port", "FROM base\nEXPOSE 3000\nCMD node server.js\n", &recipe.Start{Cmd: "node server.js", Ready: recipe.Ready{Port: 3000}}},
		{"entrypoint and cmd", "FROM base\nENTRYPOINT [\"/bin/app\"]\nCMD [\"--flag\", \"a b\"]\n", &recipe.Start{Cmd: "/bin/app --flag 'a b'"}},
		{"entrypoint resets cmd", "FROM base\nCMD [\"x\"]\nENTRYPOINT [\"/bin/app\"]\n", &recipe.Start{Cmd: "/bin/app"}},
		{"udp port is no ready check", "FROM base\nEXPOSE 53/udp\nCMD [\"dns\"]\n", &recipe.Start{Cmd: "dns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.df), Options{})
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got.Start)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Errorf("start = %s, want %s", gj, wj)
			}
		})
	}
}

// Unsupported input is refused with a message that names the line.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, df, want string
		ctx            string
	}{
		{"empty", "", "no instructions", ctx},
		{"multi-stage", "FROM golang AS build\nRUN go build\nFROM debian\nCOPY --from=build /app /app\n", "line 3: multi-stage", ctx},
		{"scratch", "FROM scratch\n", "line 1: FROM scratch", ctx},
		{"copy from", "FROM base\nCOPY --from=other /a /b\n", "line 2: COPY --from", ctx},
		{"add url", "FROM base\nADD https://example.com/x.tgz /x\n", "line 2: ADD of a URL", ctx},
		{"add archive", "FROM base\nADD rootfs.tar.gz /\n", "line 2: ADD of a local archive", ctx},
		{"run mount", "FROM base\nRUN --mount=type=cache,target=/root/.cache pip install x\n", "line 2: RUN --mount", ctx},
		{"onbuild", "FROM base\nONBUILD RUN x\n", "line 2: ONBUILD", ctx},
		{"copy without context", "FROM base\nCOPY a /a\n", "line 2: COPY needs a build context", ""},
		{"copy escapes context", "FROM base\nCOPY ../secret /s\n", "leaves the build context", ctx},
		{"several sources, no trailing slash", "FROM base\nCOPY a b /dir\n", "line 2: COPY with several sources", ctx},
		{"bad env name", "FROM base\nENV 1BAD=x\n", "not a valid variable name", ctx},
		{"parse error", "FROM base\nENV\n", "ENV", ctx},
		{"unknown instruction", "FROM base\nFROBNICATE x\n", "", ctx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.df), Options{Context: tc.ctx})
			if err == nil {
				t.Fatalf("parsed; want an error")
			}
			if errdefs.Class(err) != errdefs.ErrInvalidArgument {
				t.Errorf("class %v, want invalid argument (%v)", errdefs.Class(err), err)
			}
			if !strings.Contains(errdefs.PublicMessage(err), tc.want) {
				t.Errorf("message %q does not say %q", errdefs.PublicMessage(err), tc.want)
			}
		})
	}
}

func TestShellRunsThroughShellInstruction(t *testing.T) {
	got, err := Parse(strings.NewReader("FROM base\nSHELL [\"/bin/bash\", \"-o\", \"pipefail\", \"-c\"]\nRUN echo $BASH_VERSION | cat\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/bash", "-o", "pipefail", "-c", "echo $BASH_VERSION | cat"}
	if r := got.Steps[0].Run; r == nil || strings.Join(r.Argv, "|") != strings.Join(want, "|") {
		t.Errorf("run = %+v, want argv %q", got.Steps[0].Run, want)
	}
}

// The image FROM names has an environment: $PATH in ENV and $HOME in
// WORKDIR expand against it, as in docker build; ENV wins over it.
func TestSourceEnv(t *testing.T) {
	var asked recipe.Source
	got, err := Parse(strings.NewReader("FROM python:3.12\nENV PATH=/opt/venv/bin:$PATH\nWORKDIR $HOME/app\nENV HOME=/srv\nWORKDIR $HOME\n"), Options{
		SourceEnv: func(from recipe.Source) (map[string]string, error) {
			asked = from
			return map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root"}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if asked.Image != "python:3.12" {
		t.Errorf("asked for the environment of %+v", asked)
	}
	if v := got.Steps[0].Env[0].Value; v != "/opt/venv/bin:/usr/bin:/bin" {
		t.Errorf("PATH = %q", v)
	}
	if w := got.Steps[1].Workdir; w != "/root/app" {
		t.Errorf("first WORKDIR = %q", w)
	}
	if w := got.Steps[3].Workdir; w != "/srv" {
		t.Errorf("second WORKDIR = %q", w)
	}

	_, err = Parse(strings.NewReader("FROM nope\n"), Options{SourceEnv: func(recipe.Source) (map[string]string, error) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "from: template %q not found", "nope")
	}})
	if errdefs.Class(err) != errdefs.ErrInvalidArgument {
		t.Errorf("a source that does not resolve: %v", err)
	}
}
