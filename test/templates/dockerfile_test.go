package templates

import (
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// dockerfile uses every instruction spaced supports; its start command is
// a web server the template's sandboxes must find already listening.
const dockerfile = `# syntax=docker/dockerfile:1
ARG BASE=base
FROM ${BASE}
ARG GREETING=hello
LABEL purpose=test
USER root
ENV APP_HOME=/srv/app PORT=8080
ENV SPACED value with spaces
WORKDIR $APP_HOME
COPY --chown=user:user app/ ./
COPY --chmod=0600 secret.txt /etc/app-secret
ADD notes.txt /srv/
RUN echo "$GREETING from step 8" && echo "greeting=$GREETING" > /srv/greeting && ls /srv/app
RUN ["/bin/sh", "-c", "echo exec-form > /srv/exec-form"]
RUN <<EOF
echo heredoc-line-1 > /srv/heredoc
echo heredoc-line-2 >> /srv/heredoc
EOF
USER user
EXPOSE 8080
CMD ["python3", "-m", "http.server", "8080", "--directory", "/srv"]
`

// TestDockerfile builds a Dockerfile with every supported instruction and
// checks a sandbox of the template (files, owners, modes, env, workdir,
// user, the start command's server answering at once); builds it again
// (every RUN and COPY cached, nothing runs); changes one COPY'd file (the
// steps before it stay cached, it and the ones after it run again).
func TestDockerfile(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "dockerfile", CIDR: "10.247.0.0/22"})
	ctxDir := t.TempDir()
	writeTree(t, ctxDir, map[string]string{
		"app/main.py":    "print('app')\n",
		"app/lib/x.py":   "X = 1\n",
		"secret.txt":     "s3cret\n",
		"notes.txt":      "notes v1\n",
		"debug.log":      "excluded by .dockerignore\n",
		".dockerignore":  "*.log\n",
		"Dockerfile":     dockerfile,
		"unused/big.bin": strings.Repeat("x", 1<<16),
	})
	req := client.BuildRequest{Name: "web:v1", Dockerfile: dockerfile, BuildArgs: map[string]string{"GREETING": "bonjour"}}
	ready, ran := metric(t, d, `space_template_builds_total{state="ready"}`), metric(t, d, `space_template_build_steps_total{cached="false"}`)
	first := mustBuild(t, d, ctxDir, req)
	if first.Cached != 0 || first.Layered != 6 || !first.Started {
		t.Errorf("first build: %d of %d cached, started %v; want 0 of 6, started", first.Cached, first.Layered, first.Started)
	}
	// (other tests build on this spaced too: at least, not exactly)
	if got := metric(t, d, `space_template_builds_total{state="ready"}`); got < ready+1 {
		t.Errorf("space_template_builds_total{state=ready} went from %v to %v", ready, got)
	}
	if got := metric(t, d, `space_template_build_steps_total{cached="false"}`); got < ran+6 {
		t.Errorf("space_template_build_steps_total{cached=false} went from %v to %v, want 6 more", ran, got)
	}
	if !strings.Contains(first.messages(-1), "bonjour from step 8") {
		t.Errorf("the RUN's output is not in the log:\n%s", first.messages(-1))
	}

	// A sandbox of the template: the server answers with the create's
	// answer (its process was checkpointed running), and the steps'
	// files, env, user and workdir are there.
	start := time.Now()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "web:v1"})
	created := time.Since(start)
	if got := sh(t, d, sb.ID, "", `curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/greeting`); got != "200" {
		t.Errorf("the start command's server answered %q right after the create, want 200", got)
	}
	t.Logf("create of a started template took %s", created.Round(time.Millisecond))
	checks := map[string]string{
		"id -un":                                  "user",
		"pwd":                                     "/srv/app",
		"echo $PORT $APP_HOME":                    "8080 /srv/app",
		"echo $SPACED":                            "value with spaces",
		"cat /srv/greeting":                       "greeting=bonjour",
		"cat /srv/exec-form":                      "exec-form",
		"cat /srv/heredoc":                        "heredoc-line-1\nheredoc-line-2",
		"cat /srv/notes.txt":                      "notes v1",
		"stat -c '%U:%G %a' /srv/app/main.py":     "user:user 644",
		"stat -c '%U:%G %a' /srv/app/lib/x.py":    "user:user 644",
		"sudo stat -c '%U:%G %a' /etc/app-secret": "root:root 600",
		"ls /srv/app":                             "lib\nmain.py",
		"test -e /srv/app/debug.log && echo yes || echo no": "no",
		"test -e /etc/resolv.conf && echo yes":              "yes",
	}
	for cmd, want := range checks {
		if got := strings.TrimSpace(sh(t, d, sb.ID, "", cmd)); got != want {
			t.Errorf("%s = %q, want %q", cmd, got, want)
		}
	}
	// ARG values reach RUN only: they are not in the template's env.
	if got := strings.TrimSpace(sh(t, d, sb.ID, "", "echo \"[$GREETING]\"")); got != "[]" {
		t.Errorf("a build arg leaked into the template's env: %q", got)
	}

	// The same again: every step cached, no RUN output, the same image.
	again := mustBuild(t, d, ctxDir, req)
	if again.Cached != again.Layered || again.Image != first.Image {
		t.Errorf("rebuild: %d of %d cached, image %s (first %s)", again.Cached, again.Layered, again.Image, first.Image)
	}
	if strings.Contains(again.messages(-1), "bonjour from step 8") {
		t.Errorf("a cached step ran again:\n%s", again.messages(-1))
	}
	// The log says which steps were cached in a field of its own, on the
	// step's first line and nowhere else.
	marked := 0
	for _, e := range again.log {
		if e.Cached {
			marked++
			if !strings.HasSuffix(e.Message, "(cached)") {
				t.Errorf("a line marked cached: %q", e.Message)
			}
		}
	}
	if marked != again.Cached+1 { // the RUN/COPY steps and the start command
		t.Errorf("%d log lines marked cached, want %d", marked, again.Cached+1)
	}

	// Change the file the third COPY (ADD notes.txt, step 7) copies: steps
	// before it stay cached, it and the ones after it run again.
	writeTree(t, ctxDir, map[string]string{"notes.txt": "notes v2\n", "unused/big.bin": "changed, but no step copies it"})
	changed := mustBuild(t, d, ctxDir, req)
	for step := 1; step <= len(changed.log); step++ {
		msgs := changed.messages(step)
		header := firstLine(msgs)
		if !strings.HasPrefix(header, "[") || !(strings.Contains(header, "COPY") || strings.Contains(header, "RUN")) {
			continue
		}
		wantCached := step < 7
		if cached := strings.HasSuffix(header, "(cached)"); cached != wantCached {
			t.Errorf("after the change, step %d cached %v, want %v: %s", step, cached, wantCached, header)
		}
	}
	if changed.Cached != 2 {
		t.Errorf("after the change %d RUN/COPY steps were cached, want 2 (the two COPYs before it)", changed.Cached)
	}
	sb2 := d.NewSandbox(t, client.CreateSandboxRequest{Template: "web:v1"})
	if got := strings.TrimSpace(sh(t, d, sb2.ID, "", "cat /srv/notes.txt")); got != "notes v2" {
		t.Errorf("new sandbox sees %q, want notes v2", got)
	}
	// The first sandbox keeps the image it was made from.
	if got := strings.TrimSpace(sh(t, d, sb.ID, "", "cat /srv/notes.txt")); got != "notes v1" {
		t.Errorf("the old sandbox sees %q, want notes v1", got)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestStepsAPI builds from steps (the native API's other form) on the
// base template with a ready check by URL, and one without a start
// command, whose sandboxes boot (not restore) with the steps' config.
func TestStepsAPI(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "steps", CIDR: "10.247.4.0/22"})
	ctxDir := t.TempDir()
	writeTree(t, ctxDir, map[string]string{"site/index.html": "<h1>steps</h1>\n", "tool.sh": "#!/bin/sh\necho tool\n"})
	b := mustBuild(t, d, ctxDir, client.BuildRequest{
		Name: "site",
		From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{
			{Run: "mkdir -p /opt/site && chown user /opt/site", User: "root"},
			{Copy: &client.BuildCopy{Src: []string{"site/"}, Dest: "/opt/site", Owner: "user"}},
			{Copy: &client.BuildCopy{Src: []string{"tool.sh"}, Dest: "/usr/local/bin/tool", Mode: "0755"}},
			{Env: map[string]string{"SITE": "/opt/site"}},
			{Workdir: "/opt/site"},
		},
		Start: &client.BuildStart{Cmd: "python3 -m http.server 9000", Ready: client.BuildReady{URL: "http://localhost:9000/index.html"}},
	})
	if b.Tags[0] != "default" {
		t.Errorf("tags %v, want [default]", b.Tags)
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "site"})
	if got := sh(t, d, sb.ID, "", "curl -s http://localhost:9000/index.html; tool; echo $SITE; pwd; id -un"); got != "<h1>steps</h1>\ntool\n/opt/site\n/opt/site\nuser\n" {
		t.Errorf("sandbox of site: %q", got)
	}

	// On a started template, without a start command of its own: the
	// parent's start command runs (E2B's rule), with this one's config.
	child := mustBuild(t, d, "", client.BuildRequest{
		Name: "child", From: &client.BuildFrom{Template: "site"},
		Steps: []client.BuildStep{{Env: map[string]string{"EXTRA": "1"}}, {User: "root"}},
	})
	if !child.Started {
		t.Error("a template built on a started one should run its parent's start command")
	}
	sb2 := d.NewSandbox(t, client.CreateSandboxRequest{Template: "child"})
	if got := sh(t, d, sb2.ID, "", "id -un; echo $EXTRA $SITE; curl -s http://localhost:9000/index.html"); got != "root\n1 /opt/site\n<h1>steps</h1>\n" {
		t.Errorf("sandbox of child: %q", got)
	}

	// A URL that answers, but not 200 itself (http.server redirects a
	// directory asked for without its slash), is never ready.
	redirect := build(t, d, "", client.BuildRequest{Name: "redirect", From: &client.BuildFrom{Template: "site"},
		Start: &client.BuildStart{Cmd: "python3 -m http.server 9001 --directory /", Ready: client.BuildReady{URL: "http://localhost:9001/opt", TimeoutSeconds: 3}}})
	if redirect.State != client.BuildStateFailed || redirect.Error == nil || !strings.Contains(redirect.Error.Message, "not ready within 3s") {
		t.Errorf("a ready URL answering 301: %s, %+v; want failed, not ready", redirect.State, redirect.Error)
	}

	// No start command anywhere: sandboxes boot from the image. Its
	// WORKDIR, which base lacks and no step makes, is made by the build,
	// owned by the USER then (BuildKit's rule).
	plain := mustBuild(t, d, "", client.BuildRequest{
		Name: "plain", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "echo plain > /tmp/plain"}, {User: "user"}, {Workdir: "/srv/made/here"}},
	})
	if plain.Started {
		t.Error("plain has no start command but says it started")
	}
	sb3 := d.NewSandbox(t, client.CreateSandboxRequest{Template: "plain"})
	if got := sh(t, d, sb3.ID, "", "id -un; pwd; stat -c %U . ..; cat /tmp/plain"); got != "user\n/srv/made/here\nuser\nuser\nplain\n" {
		t.Errorf("sandbox of plain: %q", got)
	}
}
