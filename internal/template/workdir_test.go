package template

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/recipe"
)

func TestLastWorkdir(t *testing.T) {
	run := recipe.Step{Run: &recipe.Run{Shell: "true"}}
	wd := func(d string) recipe.Step { return recipe.Step{Workdir: d} }
	for _, tc := range []struct {
		name  string
		steps []recipe.Step
		want  int
	}{
		{"none", nil, -1},
		{"a RUN after it makes it", []recipe.Step{wd("/app"), run}, -1},
		{"last step", []recipe.Step{run, wd("/app")}, 1},
		{"only steps", []recipe.Step{wd("/a"), wd("/b")}, 1},
		{"config after it", []recipe.Step{run, wd("/app"), {User: "user"}}, 1},
	} {
		if got := lastWorkdir(tc.steps); got != tc.want {
			t.Errorf("%s: lastWorkdir = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestMkWorkdir runs the script a build runs for a WORKDIR: the missing
// directories are made and belong to the user, existing ones are left.
func TestMkWorkdir(t *testing.T) {
	root := t.TempDir()
	have := filepath.Join(root, "have")
	if err := os.Mkdir(have, 0o700); err != nil {
		t.Fatal(err)
	}
	uid := strconv.Itoa(os.Getuid())
	for _, tc := range []struct{ dir, user string }{
		{filepath.Join(have, "a", "b"), uid},
		{filepath.Join(root, "c"), ""},
		{have, uid},
	} {
		out, err := exec.Command("/bin/sh", "-c", mkWorkdir, "mkworkdir", tc.dir, tc.user).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", tc.dir, err, out)
		}
		if st, err := os.Stat(tc.dir); err != nil || !st.IsDir() {
			t.Fatalf("%s not made: %v", tc.dir, err)
		}
	}
	if st, _ := os.Stat(have); st.Mode().Perm() != 0o700 {
		t.Errorf("an existing directory changed: %v", st.Mode())
	}
	if os.Getuid() == 0 { // the owner is the USER's, for the made ones only
		if err := exec.Command("/bin/sh", "-c", mkWorkdir, "mkworkdir", filepath.Join(have, "n1", "n2"), "65534:65534").Run(); err != nil {
			t.Fatal(err)
		}
		for dir, want := range map[string]uint32{have: 0, filepath.Join(have, "n1"): 65534, filepath.Join(have, "n1", "n2"): 65534} {
			st, _ := os.Stat(dir)
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid != want {
				t.Errorf("%s belongs to %d, want %d", dir, uid, want)
			}
		}
	}
	// A file in the way fails.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("/bin/sh", "-c", mkWorkdir, "mkworkdir", filepath.Join(file, "x"), "").Run(); err == nil {
		t.Error("a WORKDIR under a file was made")
	}
}
