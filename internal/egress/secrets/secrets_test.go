package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const value = "sk-live-0123456789abcdef"
	m, err := s.Put("openai", value, Binding{Host: "API.OpenAI.com.", Port: 443, Header: "Authorization", HeaderFormat: "Bearer {secret}"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Host != "api.openai.com" || m.Version != 1 {
		t.Errorf("meta %+v", m)
	}
	for _, f := range []string{"secrets.json", "secrets.keyset.json"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want 0600", f, st.Mode(), err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, f))
		if bytes.Contains(data, []byte(value)) {
			t.Errorf("%s holds the value in clear", f)
		}
	}
	// Rotation, then a reopen with the same keyset reads the new value.
	if m, err = s.Put("openai", value+"-2", Binding{Host: "api.openai.com"}); err != nil || m.Version != 2 {
		t.Fatalf("rotate: %+v %v", m, err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := s2.Open("openai"); err != nil || got != value+"-2" {
		t.Errorf("reopened value %q %v", got, err)
	}
	if err := s2.Delete("openai"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.Open("openai"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted secret opens: %v", err)
	}
}

func TestPutRefuses(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, value string
		b           Binding
	}{
		{"Bad Name", "v", Binding{Host: "a.example"}},
		{"ok", "", Binding{Host: "a.example"}},
		{"ok", "a\nb", Binding{Host: "a.example"}},
		{"ok", "v", Binding{Host: "a..example"}},
		{"ok", "v", Binding{Host: "a.example", PathPrefix: "v1"}},
		{"ok", "v", Binding{Host: "a.example", Header: "Bad Header"}},
		{"ok", "v", Binding{Host: "a.example", Header: "X", HeaderFormat: "no token"}},
		{"ok", "v", Binding{Host: "a.example", HeaderFormat: "{secret}"}},
	} {
		if _, err := s.Put(tc.name, tc.value, tc.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(%q, %q, %+v) = %v, want ErrInvalid", tc.name, tc.value, tc.b, err)
		}
	}
	if len(s.List()) != 0 {
		t.Error("a refused Put stored something")
	}
}
