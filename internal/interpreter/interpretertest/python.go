// Package interpretertest gives tests of the code interpreter real
// kernels: a Python venv with the pinned wheels of
// scripts/interpreter-requirements.txt (ipykernel, the data stack,
// bash_kernel), installed offline from the wheelhouse scripts/fetch-wheels.sh
// fills, and the Deno binary that script puts next to the wheels. Both
// are made once per machine (and again only when the pins change), under
// a lock, so test packages running at once share them.
package interpretertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// CacheDir holds the wheelhouse and the venvs (SPACE_INTERPRETER_CACHE).
func CacheDir() string {
	if d := os.Getenv("SPACE_INTERPRETER_CACHE"); d != "" {
		return d
	}
	return "/var/cache/space/interpreter"
}

// Root is the repository's root (the directory of go.mod).
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// Python returns a python with ipykernel, the data stack and bash_kernel
// installed, or skips (strict: fails) tb when the machine cannot make one:
// no python3 3.11 with venv, or no wheelhouse and no way to fetch it.
func Python(tb testing.TB) string {
	tb.Helper()
	testenv.NeedCommand(tb, "python3", "npm") // npm: fetch-wheels.sh fetches Deno too
	out, err := exec.Command("python3", "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		testenv.Skipf(tb, "python3 cannot make a venv: %v", err)
	}
	if v := strings.TrimSpace(string(out)); v != "3.11" {
		testenv.Skipf(tb, "python3 is %s; the wheelhouse is for 3.11 (Debian 12's)", v)
	}
	root := Root(tb)
	req := filepath.Join(root, "scripts", "interpreter-requirements.txt")
	b, err := os.ReadFile(req)
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(b)
	pins := hex.EncodeToString(sum[:])[:16]

	cache := CacheDir()
	unlock := lockCache(tb)
	defer unlock()
	wheels := wheelhouse(tb, root)
	venv := filepath.Join(cache, "venv-"+pins)
	python := filepath.Join(venv, "bin", "python")
	marker := filepath.Join(venv, ".installed")
	if got, _ := os.ReadFile(marker); string(got) == pins {
		return python
	}
	tb.Logf("interpretertest: building %s from %s (once per pin set)", venv, wheels)
	_ = os.RemoveAll(venv)
	if msg, err := run(root, "python3", "-m", "venv", venv); err != nil {
		tb.Fatalf("python3 -m venv: %v\n%s", err, msg)
	}
	if msg, err := run(root, python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
		"--no-input", "--no-index", "--find-links", wheels, "-r", req); err != nil {
		tb.Fatalf("pip install from the wheelhouse: %v\n%s", err, msg)
	}
	// Warm matplotlib's font cache once, not in the first test's kernel.
	if msg, err := run(root, python, "-c", "import matplotlib.pyplot"); err != nil {
		tb.Fatalf("import matplotlib: %v\n%s", err, msg)
	}
	if err := os.WriteFile(marker, []byte(pins), 0o644); err != nil {
		tb.Fatal(err)
	}
	return python
}

// Deno returns the deno binary of the wheelhouse (the javascript and
// typescript kernel), or skips (strict: fails) tb when it cannot be
// fetched (no npm, or no registry).
func Deno(tb testing.TB) string {
	tb.Helper()
	testenv.NeedCommand(tb, "python3", "npm")
	unlock := lockCache(tb)
	defer unlock()
	return filepath.Join(wheelhouse(tb, Root(tb)), "deno")
}

// lockCache creates the cache and takes its lock.
func lockCache(tb testing.TB) func() {
	tb.Helper()
	cache := CacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		testenv.Skipf(tb, "cannot create %s: %v", cache, err)
	}
	return lock(tb, filepath.Join(cache, ".lock"))
}

// wheelhouse fills the wheelhouse (a no-op when its pins match) and
// returns it; the caller holds the cache's lock.
func wheelhouse(tb testing.TB, root string) string {
	tb.Helper()
	wheels := filepath.Join(CacheDir(), "wheels")
	if msg, err := run(root, filepath.Join(root, "scripts", "fetch-wheels.sh"), wheels); err != nil {
		testenv.Skipf(tb, "no wheelhouse at %s and scripts/fetch-wheels.sh failed: %v\n%s", wheels, err, msg)
	}
	return wheels
}

func run(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// lock takes an exclusive lock on path, for the processes of one machine.
func lock(tb testing.TB, path string) func() {
	tb.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatal(fmt.Errorf("open lock: %w", err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Fatal(fmt.Errorf("lock %s: %w", path, err))
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
}
