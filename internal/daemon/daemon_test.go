package daemon

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/config"
)

// TestLoadAPIKey: the configured key wins; else the stored one; else a new
// one is generated, stored 0600 and found again by the next start.
func TestLoadAPIKey(t *testing.T) {
	dir := t.TempDir()
	if key, err := loadAPIKey(config.Config{APIKey: "given", DataDir: dir}); err != nil || key != "given" {
		t.Fatalf("configured key: %q, %v", key, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "api-key")); !os.IsNotExist(err) {
		t.Fatalf("a configured key was stored: %v", err)
	}
	first, err := loadAPIKey(config.Config{DataDir: dir})
	if err != nil || !strings.HasPrefix(first, "space_") || len(first) < 40 {
		t.Fatalf("generated key %q, %v", first, err)
	}
	st, err := os.Stat(filepath.Join(dir, "api-key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored key: %v, mode %v; want 0600", err, st.Mode())
	}
	again, err := loadAPIKey(config.Config{DataDir: dir})
	if err != nil || again != first {
		t.Fatalf("the next start got %q, %v; want the stored %q", again, err, first)
	}
	// An empty file is no key: a new one is made.
	os.WriteFile(filepath.Join(dir, "api-key"), []byte("\n"), 0o600)
	if key, err := loadAPIKey(config.Config{DataDir: dir}); err != nil || key == "" || key == first {
		t.Fatalf("after an empty key file: %q, %v", key, err)
	}
}

// TestCustomerKeysFile: the operator's key file is read line by line; a bad
// line fails the start and says which, and no key material is echoed.
func TestCustomerKeysFile(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	for _, tc := range []struct {
		name    string
		file    string
		ids     []string
		wantErr string
	}{
		{"two keys, a comment and blank lines", "# ours\nacme " + key + "\n\n  beta   " + key + "  \n", []string{"acme", "beta"}, ""},
		{"no key", "acme\n", nil, "line 1"},
		{"not base64", "acme " + key + "\nbeta not-base64!\n", nil, "line 2"},
		{"short key", "acme " + base64.StdEncoding.EncodeToString([]byte("short")) + "\n", nil, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "customer-keys")
			os.WriteFile(file, []byte(tc.file), 0o600)
			keys, err := openKeyring(config.Config{PlatformKeyFile: filepath.Join(dir, "keys", "platform.json"), CustomerKeysFile: file})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), key) {
					t.Fatalf("the error shows key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := keys.CustomerKeyIDs()
			slices.Sort(got)
			if !slices.Equal(got, tc.ids) {
				t.Fatalf("customer keys %v, want %v", got, tc.ids)
			}
		})
	}
}

// TestClearDir: images a crash left are removed, the dir itself stays.
func TestClearDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	if err := clearDir(dir); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "ckpt", "sub"), 0o700)
	os.WriteFile(filepath.Join(dir, "ckpt", "sub", "pages.img"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "loose"), []byte("x"), 0o600)
	if err := clearDir(dir); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("after clearDir: %v, %v", entries, err)
	}
}

// TestWithConsole: /ui and /ui/... go to the console, everything else
// (including a path that only starts with "/ui") to the API.
func TestWithConsole(t *testing.T) {
	h := withConsole(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("api")) }),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ui")) }),
	)
	for path, want := range map[string]string{
		"/ui": "ui", "/ui/": "ui", "/ui/sandboxes/x": "ui", "/ui/api/v1/sandboxes": "ui",
		"/uix": "api", "/v1/sandboxes": "api", "/": "api", "/sandboxes": "api",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Body.String() != want {
			t.Errorf("%s went to %s, want %s", path, rec.Body.String(), want)
		}
	}
}

// TestClusterNode: records carry the node only in cluster mode.
func TestClusterNode(t *testing.T) {
	if got := clusterNode(config.Config{NodeID: "n1"}); got != "" {
		t.Errorf("embedded store: node %q, want none", got)
	}
	if got := clusterNode(config.Config{NodeID: "n1", DatabaseURL: "postgres://x"}); got != "n1" {
		t.Errorf("cluster mode: node %q, want n1", got)
	}
}
