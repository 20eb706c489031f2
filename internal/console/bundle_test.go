package console

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

const webDir = "../../web/console"

// sourcesHash is what scripts/build-console.sh records: sha256sum of the
// `sha256sum` lines of every source file, sorted by path.
func sourcesHash(t *testing.T) string {
	t.Helper()
	var paths []string
	for _, root := range []string{"package.json", "package-lock.json", "build.mjs", "src"} {
		err := filepath.WalkDir(filepath.Join(webDir, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(webDir, p)
				paths = append(paths, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(paths)
	var lines bytes.Buffer
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(webDir, p))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&lines, "%x  %s\n", sha256.Sum256(data), p)
	}
	return fmt.Sprintf("%x", sha256.Sum256(lines.Bytes()))
}

// TestBundleIsCurrent fails when web/console changed after the committed
// bundle was built: run scripts/build-console.sh and commit its output.
func TestBundleIsCurrent(t *testing.T) {
	recorded, err := os.ReadFile("dist/sources.sha256")
	if err != nil {
		t.Fatalf("%v: run scripts/build-console.sh", err)
	}
	if got, want := sourcesHash(t), strings.TrimSpace(string(recorded)); got != want {
		t.Fatalf("web/console changed since internal/console/dist was built (sources %s, bundle built from %s): run scripts/build-console.sh and commit dist", got, want)
	}
}

// TestBundleRebuilds rebuilds the bundle from the sources with the pinned
// npm packages and compares it byte for byte with the committed one, so a
// hand-edited or half-built bundle fails too. It needs web/console's
// node_modules (scripts/install-deps.sh runs npm ci there).
func TestBundleRebuilds(t *testing.T) {
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "esbuild")); err != nil {
		testenv.Skip(t, "web/console/node_modules is missing (scripts/install-deps.sh runs npm ci there)")
	}
	if r := testenv.CheckCommand("node"); r != "" {
		testenv.Skip(t, r)
	}
	out := t.TempDir()
	cmd := exec.Command("node", "build.mjs", out)
	cmd.Dir = webDir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node build.mjs: %v\n%s", err, msg)
	}
	err := filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		built, _ := os.ReadFile(p)
		committed, err := os.ReadFile(filepath.Join("dist", rel))
		if err != nil || !bytes.Equal(built, committed) {
			t.Errorf("dist/%s differs from a build of web/console: run scripts/build-console.sh and commit dist", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
