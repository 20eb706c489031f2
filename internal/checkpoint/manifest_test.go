package checkpoint

import (
	"encoding/json"
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
