// Package fault injects faults into a real spaced with real gVisor sandboxes
// (kill -9 of spaced mid-create and mid-exec, of a sandbox's runsc
// processes, a full data disk) and checks what clients see and what is
// left on the host; it also runs the shortened soak. Each test starts its
// own spaced on its own address range inside 10.246.0.0/16. The package
// skips itself where it cannot run (not root, no runsc, no base template).
package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// env is what TestMain prepared for every test.
var env struct {
	skip         string // why the package cannot run, or ""
	repo         string
	bin          string // dir with spaced, space-agent, space
	templatesDir string
	runsc        string
	tmp          string
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	env.runsc = envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc")
	env.templatesDir = envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates")
	switch {
	case os.Geteuid() != 0:
		env.skip = "fault tests need root (they run spaced, runsc, netns and nftables, and mount a small filesystem)"
	case !exists(env.runsc):
		env.skip = fmt.Sprintf("runsc not found at %s (run scripts/install-deps.sh or set SPACE_RUNSC)", env.runsc)
	case !exists(filepath.Join(env.templatesDir, "base", "current")):
		env.skip = fmt.Sprintf("base template not found at %s/base/current (run scripts/build-template.sh or set SPACE_TEMPLATES_DIR)", env.templatesDir)
	}
	if env.skip != "" {
		fmt.Fprintln(os.Stderr, "fault: skipping:", env.skip)
		return m.Run() // every test skips with the reason
	}
	tmp, err := os.MkdirTemp("", "space-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		return 1
	}
	env.tmp = tmp
	if err := build(); err != nil {
		fmt.Fprintln(os.Stderr, "fault: build:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		os.RemoveAll(tmp)
	} else {
		fmt.Fprintln(os.Stderr, "fault: logs kept in", tmp)
	}
	return code
}

// build compiles the binaries under test and installs the fresh agent into
// the base template (a quick no-op when the rootfs is cached), as test/e2e
// does.
func build() error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return err
	}
	env.repo = filepath.Dir(strings.TrimSpace(string(out)))
	env.bin = filepath.Join(env.tmp, "bin")
	steps := [][]string{
		{"go", "build", "-o", filepath.Join(env.bin, "spaced"), "./cmd/spaced"},
		{"go", "build", "-o", filepath.Join(env.bin, "space"), "./cmd/space"},
		{"go", "build", "-o", filepath.Join(env.bin, "space-agent"), "./cmd/space-agent"},
		{"scripts/build-template.sh", "--out", env.templatesDir, "--agent", filepath.Join(env.bin, "space-agent")},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = env.repo
		cmd.Env = os.Environ()
		if strings.HasSuffix(s[len(s)-1], "space-agent") {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// need skips t when the package cannot run.
func need(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
}
