package checkpoint

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/seal"
)

// FuzzDecodeManifest: any bytes decode to a valid manifest or an error,
// never a panic, and a decoded manifest re-encodes to one with the same
// digest (which Load relies on to verify it).
//
//	go test -fuzz FuzzDecodeManifest ./internal/checkpoint/
func FuzzDecodeManifest(f *testing.F) {
	wk := seal.WrappedKey{KEK: "platform-00000001", Ciphertext: []byte{1, 2, 3}}
	m := &Manifest{
		Version: ManifestVersion, ID: "c1", Kind: KindCheckpoint, SandboxID: "s", CreatedAt: time.Unix(1, 2).UTC(),
		Network: json.RawMessage(`{"a": [1, 2]}`), Meta: map[string]string{"k": "v"},
		Artifacts: []Artifact{{Name: "pages.img", Size: 10, PlainSize: 2, SHA256: string(make([]byte, 64)), WrappedKey: wk}},
		Sealed:    &Sealed{Data: []byte("x"), WrappedKey: wk},
	}
	good, _ := json.Marshal(m)
	f.Add(good)
	f.Add([]byte(`{"version": 2}`))
	f.Add([]byte(`{"version": 1, "id": "../x", "kind": "checkpoint", "sealed": {}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		d1, err := m.digest()
		if err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeManifest(again)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, again)
		}
		d2, _ := m2.digest()
		if string(d1) != string(d2) {
			t.Fatalf("digest changed across a round trip:\n%s\n%s", b, again)
		}
	})
}

// TestCheckParts: the parts of a file must cover it once, in order, only
// in a version 2 manifest, and a file is never both whole and in parts.
func TestCheckParts(t *testing.T) {
	wk := seal.WrappedKey{KEK: "platform-00000001", Ciphertext: []byte{1}}
	art := func(name, file string, off, size int64) Artifact {
		return Artifact{Name: name, File: file, Offset: off, PlainSize: size, Size: size + 40, SHA256: strings.Repeat("0", 64), WrappedKey: wk}
	}
	for _, tc := range []struct {
		name    string
		version int
		arts    []Artifact
		ok      bool
	}{
		{"whole files", 1, []Artifact{art("a", "", 0, 5), art("b", "", 0, 7)}, true},
		{"parts in order", 2, []Artifact{art("p.0", "p", 0, 4), art("p.1", "p", 4, 3)}, true},
		{"parts listed out of order", 2, []Artifact{art("p.1", "p", 4, 3), art("p.0", "p", 0, 4)}, true},
		{"parts in a version 1 manifest", 1, []Artifact{art("p.0", "p", 0, 4), art("p.1", "p", 4, 3)}, false},
		{"a gap", 2, []Artifact{art("p.0", "p", 0, 4), art("p.1", "p", 5, 3)}, false},
		{"an overlap", 2, []Artifact{art("p.0", "p", 0, 4), art("p.1", "p", 3, 3)}, false},
		{"not from the start", 2, []Artifact{art("p.1", "p", 4, 3)}, false},
		{"whole and in parts", 2, []Artifact{art("p", "", 0, 7), art("p.0", "p", 0, 7)}, false},
		{"an offset without a file", 2, []Artifact{art("a", "", 3, 5)}, false},
		{"a bad file name", 2, []Artifact{art("p.0", "../p", 0, 4)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Manifest{Version: tc.version, ID: "c1", Kind: KindCheckpoint, Artifacts: tc.arts, Sealed: &Sealed{WrappedKey: wk}}
			if err := m.check(); (err == nil) != tc.ok {
				t.Fatalf("check: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
