package recipe

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

const files = "2222222222222222222222222222222222222222222222222222222222222222"

func TestValidate(t *testing.T) {
	ok := Source{Template: "base"}
	for _, tc := range []struct {
		name string
		r    Recipe
		want string // "" = valid
	}{
		{"minimal", Recipe{From: ok}, ""},
		{"every step", Recipe{From: Source{Image: "python:3.12-slim"}, Steps: []Step{
			{Run: &Run{Shell: "pip install flask", User: "root"}},
			{Copy: &Copy{Files: files, Src: []string{"app/", "*.txt"}, Dest: "/app/", Owner: "user:user", Mode: "0755"}},
			{Env: []EnvVar{{Name: "PORT", Value: "8080"}}},
			{Workdir: "/app"}, {User: "user"},
		}, Start: &Start{Cmd: "python app.py", Ready: Ready{Port: 8080}}}, ""},
		{"no source", Recipe{}, "exactly one of template, image or archive"},
		{"two sources", Recipe{From: Source{Template: "base", Image: "debian"}}, "exactly one"},
		{"bad template", Recipe{From: Source{Template: "Bad Name"}}, "not a valid name[:tag]"},
		{"bad archive", Recipe{From: Source{Archive: "xyz"}}, "sha256"},
		{"empty step", Recipe{From: ok, Steps: []Step{{}}}, "step 1 (?): exactly one"},
		{"two kinds", Recipe{From: ok, Steps: []Step{{Workdir: "/a", User: "x"}}}, "exactly one"},
		{"run both forms", Recipe{From: ok, Steps: []Step{{Run: &Run{Shell: "x", Argv: []string{"y"}}}}}, "not both"},
		{"run nul", Recipe{From: ok, Steps: []Step{{Run: &Run{Shell: "a\x00b"}}}}, "NUL"},
		{"copy no hash", Recipe{From: ok, Steps: []Step{{Copy: &Copy{Files: "x", Src: []string{"a"}, Dest: "/a"}}}}, "sha256"},
		{"copy escape", Recipe{From: ok, Steps: []Step{{Copy: &Copy{Files: files, Src: []string{"a/../../b"}, Dest: "/a"}}}}, "leaves the build context"},
		{"copy mode", Recipe{From: ok, Steps: []Step{{Copy: &Copy{Files: files, Src: []string{"a"}, Dest: "/a", Mode: "999"}}}}, "octal"},
		{"env name", Recipe{From: ok, Steps: []Step{{Line: 4, Env: []EnvVar{{Name: "A-B", Value: "1"}}}}}, "step 1 (line 4, ENV)"},
		{"user", Recipe{From: ok, Steps: []Step{{User: "a b"}}}, "not user[:group]"},
		{"ready two", Recipe{From: ok, Start: &Start{Cmd: "x", Ready: Ready{Port: 1, File: "/f"}}}, "at most one"},
		{"ready url", Recipe{From: ok, Start: &Start{Cmd: "x", Ready: Ready{URL: "ftp://x"}}}, "http"},
		{"start empty", Recipe{From: ok, Start: &Start{Cmd: " "}}, "non-empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("invalid: %v", err)
				}
				return
			}
			if err == nil || errdefs.Class(err) != errdefs.ErrInvalidArgument || !strings.Contains(errdefs.PublicMessage(err), tc.want) {
				t.Fatalf("err = %v, want invalid argument saying %q", err, tc.want)
			}
		})
	}
}

// A step's key changes with its parent, its text and the files it copies,
// and with nothing else.
func TestStepKey(t *testing.T) {
	run := Step{Run: &Run{Shell: "make"}}
	cp := Step{Copy: &Copy{Files: files, Src: []string{"a"}, Dest: "/a"}}
	base := StepKey("p", run, "")
	same := []struct {
		name string
		key  string
	}{
		{"line and force", StepKey("p", Step{Run: &Run{Shell: "make"}, Line: 9, Force: true}, "")},
	}
	for _, s := range same {
		if s.key != base {
			t.Errorf("%s changed the key", s.name)
		}
	}
	differ := map[string]string{
		"parent":  StepKey("q", run, ""),
		"command": StepKey("p", Step{Run: &Run{Shell: "make all"}}, ""),
		"user":    StepKey("p", Step{Run: &Run{Shell: "make", User: "root"}}, ""),
	}
	for name, k := range differ {
		if k == base {
			t.Errorf("a different %s kept the key", name)
		}
	}
	other := *cp.Copy
	other.Files = strings.Repeat("3", 64)
	if StepKey("p", cp, "d1") != StepKey("p", Step{Copy: &other}, "d1") {
		t.Error("the upload a COPY's files came in changed its key")
	}
	if StepKey("p", cp, "d1") == StepKey("p", cp, "d2") {
		t.Error("different copied files kept the key")
	}
}

func TestConfigApply(t *testing.T) {
	c := Config{Env: []EnvVar{{Name: "PATH", Value: "/bin"}}, User: "root"}
	c = c.Apply(Step{Env: []EnvVar{{Name: "A", Value: "1"}, {Name: "PATH", Value: "/usr/bin"}}})
	c = c.Apply(Step{Workdir: "/srv"})
	c = c.Apply(Step{Workdir: "app"})
	c = c.Apply(Step{User: "user"})
	want := Config{Env: []EnvVar{{Name: "PATH", Value: "/usr/bin"}, {Name: "A", Value: "1"}}, Workdir: "/srv/app", User: "user"}
	if !c.Equal(want) {
		t.Errorf("config = %+v, want %+v", c, want)
	}
}
