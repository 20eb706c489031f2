package e2bcompat

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/template"
)

func TestE2BRecipe(t *testing.T) {
	sourceEnv := func(from recipe.Source, _ *ociimage.Auth) (map[string]string, error) {
		if from.Template == "missing" {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "from: template %q not found", from.Template)
		}
		return map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root"}, nil
	}
	env := func(args ...string) buildStepJSON { return buildStepJSON{Type: "ENV", Args: args} }
	tests := []struct {
		name    string
		req     buildStartJSON
		check   func(t *testing.T, r *recipe.Recipe)
		wantErr string
	}{
		{
			name: "env expands against the source's and earlier values",
			req: buildStartJSON{FromTemplate: "base", Steps: []buildStepJSON{
				env("PATH", "/opt/venv/bin:$PATH", "A", "x"), env("B", "${A}-$HOME-$NOPE"),
			}},
			check: func(t *testing.T, r *recipe.Recipe) {
				if got := r.Steps[0].Env[0].Value; got != "/opt/venv/bin:/usr/bin:/bin" {
					t.Errorf("PATH = %q", got)
				}
				if got := r.Steps[1].Env[0].Value; got != "x-/root-" {
					t.Errorf("B = %q", got)
				}
			},
		},
		{
			name: "an image gets the setup steps, which the user's numbers skip",
			req:  buildStartJSON{FromImage: "python:3.12", Steps: []buildStepJSON{{Type: "RUN", Args: []string{"true"}}}},
			check: func(t *testing.T, r *recipe.Recipe) {
				if r.Prelude != 3 || len(r.Steps) != 4 {
					t.Fatalf("prelude %d of %d steps", r.Prelude, len(r.Steps))
				}
				if got := r.StepName(3); got != "step 1 (RUN)" {
					t.Errorf("the user's first step is named %q", got)
				}
				if got := r.StepName(0); !strings.HasPrefix(got, "setup step 1") {
					t.Errorf("a setup step is named %q", got)
				}
			},
		},
		{
			// from_base_image(): no registry, this spaced's base template.
			name: "E2B's base image is the base template",
			req:  buildStartJSON{FromImage: "e2bdev/base", FromImageRegistry: &registryJSON{Username: "u", Password: "p"}, Steps: []buildStepJSON{{Type: "RUN", Args: []string{"true"}}}},
			check: func(t *testing.T, r *recipe.Recipe) {
				if r.From.Template != "base" || r.From.Image != "" || r.Prelude != 2 || len(r.Steps) != 3 || r.Steps[1].Workdir != "/home/user" {
					t.Fatalf("from %+v, prelude %d of %d steps", r.From, r.Prelude, len(r.Steps))
				}
			},
		},
		{
			name: "a ready command without a start command is a last step that waits",
			req:  buildStartJSON{FromTemplate: "base", ReadyCmd: "test -f /ready # comment"},
			check: func(t *testing.T, r *recipe.Recipe) {
				if r.Start != nil || len(r.Steps) != 1 || r.Steps[0].Run == nil || !strings.Contains(r.Steps[0].Run.Shell, "test -f /ready # comment\n)") {
					t.Fatalf("recipe %+v", r)
				}
			},
		},
		{
			name: "a start command with the SDK's port helper",
			req:  buildStartJSON{FromTemplate: "base", StartCmd: "serve", ReadyCmd: `[ -n "$(ss -Htuln sport = :8000)" ]`},
			check: func(t *testing.T, r *recipe.Recipe) {
				if r.Start == nil || r.Start.Cmd != "serve" || r.Start.Ready.Port != 8000 {
					t.Fatalf("start %+v", r.Start)
				}
			},
		},
		{name: "both sources", req: buildStartJSON{FromTemplate: "base", FromImage: "x"}, wantErr: "not both"},
		{name: "no source", req: buildStartJSON{}, wantErr: "give fromImage or fromTemplate"},
		{name: "a source that does not resolve", req: buildStartJSON{FromTemplate: "missing"}, wantErr: "not found"},
		{name: "a registry type spaced cannot use", req: buildStartJSON{FromImage: "x", FromImageRegistry: &registryJSON{Type: "aws"}}, wantErr: "not supported"},
		{name: "an odd ENV", req: buildStartJSON{FromTemplate: "base", Steps: []buildStepJSON{env("A")}}, wantErr: "step 1 (ENV)"},
		{name: "an unknown step", req: buildStartJSON{FromTemplate: "base", Steps: []buildStepJSON{{Type: "ADD"}}}, wantErr: "not one of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _, err := e2bRecipe(tc.req, sourceEnv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errdefs.Class(err) != errdefs.ErrInvalidArgument {
					t.Fatalf("err = %v, want an invalid argument with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("the recipe does not validate: %v", err)
			}
			tc.check(t, r)
		})
	}
}

// TestE2BTemplateListing: GET /templates shows the state of the newest
// build meant for the default tag (a failed one is "error" even when an
// older build is ready), and the buildID, cpu and memory of the ready
// build the default tag points at, as E2B's listing does.
func TestIsE2BBaseImage(t *testing.T) {
	for ref, want := range map[string]bool{
		"e2bdev/base": true, "e2bdev/base:latest": true, "E2BDEV/Base:v1": true,
		"docker.io/e2bdev/base:latest": true, "e2bdev/base@sha256:00": true,
		"e2bdev/base-x": false, "e2bdev/code-interpreter": false, "base": false,
		"ghcr.io/e2bdev/base": false, "python:3.12": false, "": false,
	} {
		if got := isE2BBaseImage(ref); got != want {
			t.Errorf("%q: %v, want %v", ref, got, want)
		}
	}
}

func TestE2BTemplateListing(t *testing.T) {
	now := time.Now()
	ready := &template.Build{ID: "b-ready", Tags: []string{"default"}, State: template.BuildReady, CPU: 4, MemoryMB: 2048, DiskMB: 512, CreatedAt: now.Add(-time.Hour)}
	failed := &template.Build{ID: "b-failed", Tags: []string{"default"}, State: template.BuildError, CreatedAt: now.Add(-time.Minute)}
	building := &template.Build{ID: "b-building", Tags: []string{"default"}, State: template.BuildBuilding, CreatedAt: now}
	otherTag := &template.Build{ID: "b-v2", Tags: []string{"v2"}, State: template.BuildError, CreatedAt: now}
	tagged := &template.TemplateInfo{Name: "app", Tags: []template.TagInfo{{Tag: "default", Build: "b-ready"}}}
	untagged := &template.TemplateInfo{Name: "app"}
	for _, tc := range []struct {
		name                string
		t                   *template.TemplateInfo
		builds              []*template.Build
		status, build       string
		cpu, memoryMB, disk int
	}{
		{"the only build failed", untagged, []*template.Build{failed}, "error", noBuild, 0, 0, 0},
		{"building its first", untagged, []*template.Build{building}, "building", noBuild, 0, 0, 0},
		{"ready", tagged, []*template.Build{ready}, "ready", "b-ready", 4, 2048, 512},
		{"a newer build failed", tagged, []*template.Build{failed, ready}, "error", "b-ready", 4, 2048, 512},
		{"a newer build runs", tagged, []*template.Build{building, failed, ready}, "building", "b-ready", 4, 2048, 512},
		{"builds of another tag only", untagged, []*template.Build{otherTag}, "waiting", noBuild, 0, 0, 0},
		{"another tenant's view of a platform template", tagged, nil, "ready", "b-ready", 0, 0, 0},
		{"the base", &template.TemplateInfo{Name: "base", Builtin: true}, nil, "ready", noBuild, e2bDefaultCPU, e2bDefaultMemoryMB, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e2bTemplate(tc.t, tc.builds)
			if got.BuildStatus != tc.status || got.BuildID != tc.build || got.CPUCount != tc.cpu || got.MemoryMB != tc.memoryMB || got.DiskSizeMB != tc.disk {
				t.Errorf("got status %q build %q cpu %d memory %d disk %d; want %q %q %d %d %d",
					got.BuildStatus, got.BuildID, got.CPUCount, got.MemoryMB, got.DiskSizeMB, tc.status, tc.build, tc.cpu, tc.memoryMB, tc.disk)
			}
			if got.BuildCount != len(tc.builds) {
				t.Errorf("buildCount %d, want %d", got.BuildCount, len(tc.builds))
			}
		})
	}
}

// TestE2BNames: names and tags are read as E2B reads them: trimmed, the
// name and the tag lower-cased, a tag list without repeats.
func TestE2BNames(t *testing.T) {
	for in, want := range map[string]string{"App": "app", " My-App:V1 ": "my-app:v1", "app:Latest": "app:latest", "APP:": "app:"} {
		if got := e2bRef(in); got != want {
			t.Errorf("e2bRef(%q) = %q, want %q", in, got, want)
		}
	}
	if got := e2bTags([]string{"V1", " v1", "Prod", "prod "}); !slices.Equal(got, []string{"v1", "prod"}) {
		t.Errorf("e2bTags = %v", got)
	}
}
