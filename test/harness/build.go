package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

var repo struct {
	once sync.Once
	dir  string
	err  error
}

// Repo is the root of the module under test (the tests run in their
// package's directory, and go knows where its go.mod is).
func Repo() (string, error) {
	repo.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			repo.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		repo.dir = filepath.Dir(strings.TrimSpace(string(out)))
	})
	return repo.dir, repo.err
}

var build struct {
	once sync.Once
	dir  string
	err  error
}

// BinEnv names a directory where spaced, space and space-agent are built
// already, and the base template holds that agent: scripts/test.sh builds
// them once for all the suites of its run (each would otherwise compile
// and link the same three binaries again).
const BinEnv = "SPACE_TEST_BIN"

// Build compiles spaced, space and space-agent into the suite's temp dir
// and installs the fresh agent into the base template (a quick no-op when
// the rootfs is cached: a new agent makes a new image of hard links), or,
// with $SPACE_TEST_BIN set, answers that directory. It runs once per test
// binary, on first use, so that a run of only the tests that start nothing
// builds nothing; it returns the binaries' directory.
func Build() (string, error) {
	build.once.Do(func() { build.dir, build.err = buildAll() })
	return build.dir, build.err
}

// Bin is the path of a binary under test ("spaced", "space",
// "space-agent"); it builds them first if need be, failing tb if that fails.
func Bin(tb testing.TB, name string) string {
	tb.Helper()
	dir, err := Build()
	if err != nil {
		tb.Fatalf("build: %v", err)
	}
	return filepath.Join(dir, name)
}

func buildAll() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		for _, name := range []string{"spaced", "space", "space-agent"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", BinEnv, dir, err)
			}
		}
		return dir, nil
	}
	if suite.tmp == "" {
		return "", fmt.Errorf("harness: Build before Main made the suite's temp dir")
	}
	root, err := Repo()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(suite.tmp, "bin")
	agent := filepath.Join(bin, "space-agent")
	steps := []struct {
		env  []string
		args []string
	}{
		{nil, []string{"go", "build", "-o", filepath.Join(bin, "spaced"), "./cmd/spaced"}},
		{nil, []string{"go", "build", "-o", filepath.Join(bin, "space"), "./cmd/space"}},
		// The agent runs in the template's rootfs: static, it needs none of its libraries.
		// -trimpath: the same source gives the same agent (and base image name)
		// from any checkout, so suites run from two checkouts do not flip the
		// shared base template's current image under each other.
		{nil, []string{"scripts/build-spawn-helper.sh"}}, // embedded by the agent
		{[]string{"CGO_ENABLED=0"}, []string{"go", "build", "-trimpath", "-o", agent, "./cmd/space-agent"}},
		{nil, []string{"scripts/build-template.sh", "--out", testenv.TemplatesDir(), "--agent", agent}},
	}
	for _, s := range steps {
		cmd := exec.Command(s.args[0], s.args[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), s.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(s.args, " "), err, out)
		}
	}
	return bin, nil
}
