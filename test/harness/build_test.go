package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrebuiltBinaries: with $SPACE_TEST_BIN set (scripts/test.sh), the
// harness uses the binaries there, and refuses a directory that lacks one
// rather than starting something else.
func TestPrebuiltBinaries(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(BinEnv, dir)
	for _, name := range []string{"spaced", "space"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := buildAll(); err == nil || !strings.Contains(err.Error(), "space-agent") {
		t.Fatalf("without space-agent: %v, want an error naming it", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "space-agent"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := buildAll(); err != nil || got != dir {
		t.Fatalf("buildAll: %q, %v; want %q", got, err, dir)
	}
}
