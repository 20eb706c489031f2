package policy

import (
	"strings"
	"testing"
)

// FuzzParseRule: a rule that parses prints as a rule that parses to the
// same thing, and a name rule holds only a normalised name.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.a.example:443", "203.0.113.0/24:80", "[2001:db8::/32]:443", "127.1", "a\x00b", "A.B.", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil {
			t.Fatalf("ParseRule(%q) = %q which does not parse: %v", s, r.String(), err)
		}
		if again.String() != r.String() {
			t.Fatalf("ParseRule(%q) = %q, reparsed %q", s, r.String(), again.String())
		}
		if r.IsName() {
			if n, err := NormalizeName(r.Name); err != nil || n != r.Name {
				t.Fatalf("rule name %q is not normalised (%q, %v)", r.Name, n, err)
			}
		}
	})
}

// FuzzNormalizeName: the result is idempotent, lower case, printable
// ASCII, and never an address spelling.
func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"Example.com.", "a..b", "0x7f.1", "xn--bcher-kva.example", "a%2eb", "a\x00b", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeName(s)
		if err != nil {
			return
		}
		if again, err := NormalizeName(n); err != nil || again != n {
			t.Fatalf("NormalizeName(%q) = %q, again %q %v", s, n, again, err)
		}
		if n != strings.ToLower(n) || strings.HasSuffix(n, ".") || strings.ContainsAny(n, "\x00%/ :") {
			t.Fatalf("NormalizeName(%q) = %q is not canonical", s, n)
		}
		if _, ip, err := ParseHost(n); err != nil || ip.IsValid() {
			t.Fatalf("normalised name %q reads as address %v (%v)", n, ip, err)
		}
	})
}
