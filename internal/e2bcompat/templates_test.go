package e2bcompat

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/recipe"
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
