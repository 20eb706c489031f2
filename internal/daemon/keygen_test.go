package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/seal"
)

// TestKeygen: Keygen (spaced keygen) writes a platform key spaced opens (0600),
// never replaces one, and writes one to stdout for a Secret.
func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "platform.json")
	if err := Keygen([]string{path}, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	first, _ := os.ReadFile(path)
	if _, err := seal.OpenKeyring(path); err != nil {
		t.Fatalf("spaced cannot open the key: %v", err)
	}
	if err := Keygen([]string{path}, nil); err == nil {
		t.Fatal("keygen replaced a key")
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, first) {
		t.Fatal("the key changed")
	}
	var out bytes.Buffer
	if err := Keygen([]string{"-"}, &out); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "from-stdout.json")
	if err := os.WriteFile(copied, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := seal.OpenKeyring(copied); err != nil || bytes.Equal(out.Bytes(), first) {
		t.Fatalf("the key from stdout: %v (same as the first: %v)", err, bytes.Equal(out.Bytes(), first))
	}
	if err := Keygen(nil, nil); err == nil {
		t.Fatal("keygen without a file")
	}
}
