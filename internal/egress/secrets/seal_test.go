package secrets_test

import (
	"testing"

	"github.com/spacesandbox/space/internal/egress/secrets"
)

// TestSeal: what Seal sealed opens only with the same associated data.
func TestSeal(t *testing.T) {
	s, err := secrets.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ct, err := s.Seal([]byte("hook-secret"), []byte("webhook:a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Unseal(ct, []byte("webhook:a")); err != nil || string(got) != "hook-secret" {
		t.Fatalf("Unseal = %q, %v", got, err)
	}
	if _, err := s.Unseal(ct, []byte("webhook:b")); err == nil {
		t.Fatal("a sealed secret opened under another webhook's id")
	}
}
