package seal_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

func newKeyring(t *testing.T) (*seal.Keyring, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys", "platform.json")
	k, err := seal.OpenKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	return k, path
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, seal.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func pseudoRandom(seed uint64, n int) []byte {
	var s [32]byte
	s[0] = byte(seed)
	b := make([]byte, n)
	mrand.NewChaCha8(s).Read(b)
	return b
}

// seal encrypts data with random-sized writes, as a copy loop would.
func sealBytes(t *testing.T, k *seal.Keyring, keyID string, data, ad []byte) ([]byte, seal.WrappedKey) {
	t.Helper()
	var out bytes.Buffer
	w, wk, err := k.Encrypt(&out, keyID, ad)
	if err != nil {
		t.Fatalf("Encrypt(%q): %v", keyID, err)
	}
	r := mrand.New(mrand.NewPCG(1, 2))
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(3<<20))
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), wk
}

func open(k *seal.Keyring, ct []byte, wk seal.WrappedKey, ad []byte) ([]byte, error) {
	r, err := k.Decrypt(bytes.NewReader(ct), wk, ad)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestRoundTrip(t *testing.T) {
	k, _ := newKeyring(t)
	if err := k.SetCustomerKey("acme", randomKey(t)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		keyID string
		size  int
	}{
		{"platform empty", "", 0},
		{"platform small", "", 1000},
		{"platform 20MiB", "", 20 << 20},
		{"customer one segment", "acme", 1 << 20},
		{"customer 20MiB", "acme", 20<<20 + 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := pseudoRandom(uint64(tc.size), tc.size)
			ad := []byte("ckpt/" + tc.name)
			ct, wk := sealBytes(t, k, tc.keyID, data, ad)
			if wk.KeyID != tc.keyID || wk.KEK == "" || len(wk.Ciphertext) == 0 {
				t.Fatalf("wrapped key = %+v", wk)
			}
			if tc.size > 64 && bytes.Contains(ct, data[:64]) {
				t.Fatal("ciphertext contains plaintext")
			}
			got, err := open(k, ct, wk, ad)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Decrypt = %d bytes, %v; want the %d bytes sealed", len(got), err, len(data))
			}
		})
	}
}

func TestDecryptFailures(t *testing.T) {
	k, path := newKeyring(t)
	acme := randomKey(t)
	if err := k.SetCustomerKey("acme", acme); err != nil {
		t.Fatal(err)
	}
	data := pseudoRandom(9, 3<<20)
	ad := []byte("ad")
	ct, wk := sealBytes(t, k, "acme", data, ad)
	pct, pwk := sealBytes(t, k, "", data, ad)
	other, _ := newKeyring(t) // another node's platform key file

	flip := func(i int) []byte { c := bytes.Clone(ct); c[i] ^= 1; return c }
	for _, tc := range []struct {
		name    string
		keys    *seal.Keyring
		prepare func(k *seal.Keyring)
		ct      []byte
		wk      seal.WrappedKey
		ad      []byte
		want    error
		msg     string
	}{
		{name: "missing customer key", prepare: func(k *seal.Keyring) { k.RemoveCustomerKey("acme") },
			want: seal.ErrKeyMissing, msg: `customer key "acme" is not loaded`},
		{name: "wrong customer key", prepare: func(k *seal.Keyring) { k.SetCustomerKey("acme", randomKey(t)) },
			want: seal.ErrWrongKey, msg: "is not the version that wrapped"},
		{name: "wrong platform key file", keys: other, ct: pct, wk: pwk,
			want: seal.ErrWrongKey, msg: "platform key"},
		{name: "tampered wrapped key", wk: func() seal.WrappedKey {
			w := wk
			w.Ciphertext = bytes.Clone(w.Ciphertext)
			w.Ciphertext[len(w.Ciphertext)-3] ^= 1
			return w
		}(), want: seal.ErrWrongKey, msg: "does not unwrap"},
		{name: "tampered header", ct: flip(5), want: seal.ErrAuth},
		{name: "tampered first segment", ct: flip(1000), want: seal.ErrAuth},
		{name: "tampered last segment", ct: flip(len(ct) - 10), want: seal.ErrAuth},
		{name: "truncated", ct: ct[:len(ct)-(1<<20)], want: seal.ErrAuth},
		{name: "other associated data", ad: []byte("other"), want: seal.ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kr := tc.keys
			if kr == nil { // a second node sharing the key file, with acme loaded
				var err error
				if kr, err = seal.OpenKeyring(path); err != nil {
					t.Fatal(err)
				}
				if err := kr.SetCustomerKey("acme", acme); err != nil {
					t.Fatal(err)
				}
			}
			if tc.prepare != nil {
				tc.prepare(kr)
			}
			c, w, a := ct, wk, ad
			if tc.ct != nil {
				c = tc.ct
			}
			if tc.wk.KEK != "" {
				w = tc.wk
			}
			if tc.ad != nil {
				a = tc.ad
			}
			got, err := open(kr, c, w, a)
			if !errors.Is(err, tc.want) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("Decrypt: %v, want %v (failed precondition)", err, tc.want)
			}
			if !strings.Contains(errdefs.PublicMessage(err), tc.msg) {
				t.Errorf("message %q does not say %q", errdefs.PublicMessage(err), tc.msg)
			}
			if len(got) > 0 && tc.want == seal.ErrAuth && !bytes.HasPrefix(data, got) {
				t.Error("returned bytes that are not the sealed plaintext")
			}
		})
	}
}

func TestRotation(t *testing.T) {
	k, _ := newKeyring(t)
	oldKey, newKey := randomKey(t), randomKey(t)
	if err := k.RotateCustomerKey("acme", newKey); !errors.Is(err, seal.ErrKeyMissing) {
		t.Fatalf("rotating a key never set: %v, want ErrKeyMissing", err)
	}
	if err := k.SetCustomerKey("acme", oldKey); err != nil {
		t.Fatal(err)
	}
	data := pseudoRandom(4, 2<<20+5)
	ct, wk := sealBytes(t, k, "acme", data, nil)
	_, pwk := sealBytes(t, k, "", data, nil)

	if k.NeedsRewrap(wk) {
		t.Fatal("NeedsRewrap before rotation")
	}
	if err := k.RotateCustomerKey("acme", newKey); err != nil {
		t.Fatal(err)
	}
	if !k.NeedsRewrap(wk) || k.NeedsRewrap(pwk) {
		t.Fatal("NeedsRewrap after rotation: want true for acme, false for platform")
	}
	if got, err := open(k, ct, wk, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("old version no longer decrypts during rotation: %v", err)
	}
	nwk, err := k.Rewrap(wk)
	if err != nil {
		t.Fatal(err)
	}
	if nwk.KEK != seal.Fingerprint(newKey) || nwk.KEK == wk.KEK || nwk.KeyID != "acme" {
		t.Fatalf("rewrapped key = %+v, want fingerprint %s", nwk, seal.Fingerprint(newKey))
	}
	if again, err := k.Rewrap(nwk); err != nil || !bytes.Equal(again.Ciphertext, nwk.Ciphertext) {
		t.Fatalf("Rewrap of a current key changed it: %v", err)
	}

	// Forget the old version: the re-wrapped key still opens the same ciphertext.
	if err := k.SetCustomerKey("acme", newKey); err != nil {
		t.Fatal(err)
	}
	if got, err := open(k, ct, nwk, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after rewrap and dropping the old key: %v", err)
	}
	if _, err := open(k, ct, wk, nil); !errors.Is(err, seal.ErrWrongKey) {
		t.Fatalf("the old wrapping without the old key: %v, want ErrWrongKey", err)
	}
	// Previous versions can also be supplied up front (a restarted node).
	if err := k.SetCustomerKey("acme", newKey, oldKey); err != nil {
		t.Fatal(err)
	}
	if _, err := open(k, ct, wk, nil); err != nil {
		t.Fatalf("with the old key as previous version: %v", err)
	}
}

func TestSetCustomerKeyValidation(t *testing.T) {
	k, _ := newKeyring(t)
	for _, tc := range []struct {
		name, id string
		key      []byte
	}{
		{"short key", "acme", make([]byte, 16)},
		{"long key", "acme", make([]byte, 33)},
		{"empty id", "", make([]byte, 32)},
		{"two slashes in id (one is a tenant's)", "a/b/c", make([]byte, 32)},
		{"empty tenant", "/b", make([]byte, 32)},
		{"long id", strings.Repeat("a", 129), make([]byte, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := k.SetCustomerKey(tc.id, tc.key); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("SetCustomerKey: %v, want ErrInvalidArgument", err)
			}
		})
	}
	if !k.HasKey("") || k.HasKey("acme") {
		t.Fatal("HasKey: platform must be present, acme absent")
	}
	if _, _, err := k.Encrypt(io.Discard, "acme", nil); !errors.Is(err, seal.ErrKeyMissing) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Encrypt under a missing key: %v", err)
	}
}

func TestPlatformKeyFile(t *testing.T) {
	k, path := newKeyring(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %o, want 600", st.Mode().Perm())
	}
	if st, _ := os.Stat(filepath.Dir(path)); st.Mode().Perm() != 0o700 {
		t.Errorf("key dir mode %o, want 700", st.Mode().Perm())
	}
	data := []byte("written by the first daemon")
	ct, wk := sealBytes(t, k, "", data, nil)

	k2, err := seal.OpenKeyring(path) // a second spaced on the same file
	if err != nil {
		t.Fatal(err)
	}
	if got, err := open(k2, ct, wk, nil); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("second keyring on the same file: %q, %v", got, err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := seal.OpenKeyring(path); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("world-readable key file: %v, want ErrFailedPrecondition", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("{}"), 0o600)
	if _, err := seal.OpenKeyring(bad); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("garbage key file: %v, want ErrFailedPrecondition", err)
	}
}

// Daemons starting together must agree on one platform key.
func TestPlatformKeyConcurrentCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "platform.json")
	const n = 8
	rings := make([]*seal.Keyring, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := seal.OpenKeyring(path)
			if err != nil {
				t.Error(err)
			}
			rings[i] = k
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ct, wk := sealBytes(t, rings[0], "", []byte("x"), nil)
	for i, k := range rings {
		if _, err := open(k, ct, wk, nil); err != nil {
			t.Errorf("keyring %d cannot read keyring 0's data: %v", i, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
}

// A customer key must not leak through the key file, fmt or slog.
func TestCustomerKeyNeverLeaks(t *testing.T) {
	k, path := newKeyring(t)
	key := randomKey(t)
	if err := k.SetCustomerKey("acme", key, randomKey(t)); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(h).Info("keys", "keyring", k, "value", *k)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{"key file": string(file), "slog": logs.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		outputs["fmt "+verb] = fmt.Sprintf(verb, k) + fmt.Sprintf(verb, *k)
	}
	j, _ := json.Marshal(k)
	outputs["json"] = string(j)
	forms := []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key), fmt.Sprint(key)}
	for where, out := range outputs {
		for _, f := range forms {
			if strings.Contains(out, f) {
				t.Errorf("customer key appears in %s: %s", where, out)
			}
		}
	}
	if s := fmt.Sprint(k); !strings.Contains(s, "acme="+seal.Fingerprint(key)) {
		t.Errorf("String() = %s, want the id and fingerprint", s)
	}
}

type failingReader struct {
	r   io.Reader
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	n, err := f.r.Read(p[:min(len(p), f.n)])
	f.n -= n
	return n, err
}

// An I/O error of the source is reported as itself, not as tampering, and a
// WrappedKey survives JSON.
func TestSourceErrorPassesThrough(t *testing.T) {
	k, _ := newKeyring(t)
	ct, wk := sealBytes(t, k, "", pseudoRandom(3, 3<<20), nil)
	j, err := json.Marshal(wk)
	if err != nil {
		t.Fatal(err)
	}
	var wk2 seal.WrappedKey
	if err := json.Unmarshal(j, &wk2); err != nil {
		t.Fatal(err)
	}
	ioErr := errors.New("connection reset")
	for _, at := range []int{10, 100 << 10, 2 << 20} {
		r, err := k.Decrypt(&failingReader{r: bytes.NewReader(ct), n: at, err: ioErr}, wk2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(r); !errors.Is(err, ioErr) || errors.Is(err, seal.ErrAuth) {
			t.Errorf("source failing at byte %d: %v, want the source's error", at, err)
		}
	}
}

func TestSealBytes(t *testing.T) {
	dir := t.TempDir()
	a, err := seal.OpenKeyring(dir + "/platform.json")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := a.SealBytes([]byte("keyset"), []byte("ad"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("keyset")) {
		t.Fatal("the value is in the clear")
	}
	// Another node with the same key file opens it; another key or
	// other associated data does not.
	b, err := seal.OpenKeyring(dir + "/platform.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.OpenBytes(sealed, []byte("ad")); err != nil || string(got) != "keyset" {
		t.Fatalf("open on the same key: %q, %v", got, err)
	}
	if _, err := b.OpenBytes(sealed, []byte("other")); err == nil {
		t.Error("opened with other associated data")
	}
	c, _ := seal.OpenKeyring(t.TempDir() + "/platform.json")
	if _, err := c.OpenBytes(sealed, []byte("ad")); err == nil {
		t.Error("opened with another platform key")
	}
}
