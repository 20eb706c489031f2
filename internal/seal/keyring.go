// Package seal encrypts artifacts under envelope encryption with Tink: every
// artifact gets its own data key (streaming AEAD, AES256_GCM_HKDF_1MB), and
// that data key is stored beside the artifact wrapped by a key-encryption key
// (KEK). The KEK is either the platform key, a Tink AEAD keyset kept in a
// file, or a customer key (BYOK), a raw 256-bit AES-GCM key held in memory
// only. Rotating a KEK re-wraps data keys; the data is never re-encrypted.
package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/aead/aesgcm"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/insecuresecretdataaccess"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/secretdata"
	"github.com/tink-crypto/tink-go/v2/tink"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KeySize is the length in bytes of a customer key (AES-256).
const KeySize = 32

// maxKeyIDLen bounds customer key ids, which end up in manifests and errors.
const maxKeyIDLen = 128

// Keyring holds the platform KEK and the customer KEKs. It is safe for
// concurrent use. Printing or logging it shows key ids and fingerprints only.
type Keyring struct {
	s *state // behind a pointer so that value-receiver String/LogValue never copy the lock
}

type state struct {
	mu       sync.RWMutex
	platform kek
	// platformIDs are the fingerprints of every key in the platform keyset;
	// Tink picks the right one by the id prefixed to each ciphertext.
	platformIDs map[string]bool
	// customer maps a key id to its versions, current first; older versions
	// only unwrap (see RotateCustomerKey).
	customer map[string][]kek
}

// kek is one version of a key-encryption key.
type kek struct {
	fp   string // fingerprint recorded in every WrappedKey it wraps
	aead tink.AEAD
}

func (k kek) String() string { return "kek(" + k.fp + ")" }

// OpenKeyring loads the platform keyset from path, creating it (mode 0600,
// parent directories 0700) with a fresh AES256_GCM key if it does not exist.
// Creation is atomic, so daemons sharing the file agree on one key.
func OpenKeyring(path string) (*Keyring, error) {
	h, err := readPlatformKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		h, err = createPlatformKey(path)
	}
	if err != nil {
		return nil, err
	}
	a, err := aead.New(h)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "platform key file %s does not hold an AEAD keyset", path)
	}
	info := h.KeysetInfo()
	ids := map[string]bool{}
	for _, ki := range info.GetKeyInfo() {
		ids[platformFingerprint(ki.GetKeyId())] = true
	}
	return &Keyring{s: &state{
		platform:    kek{fp: platformFingerprint(info.GetPrimaryKeyId()), aead: a},
		platformIDs: ids,
		customer:    map[string][]kek{},
	}}, nil
}

// NewPlatformKey writes a fresh platform keyset to path (mode 0600), for
// an operator to share among nodes; a file already at path is
// ErrAlreadyExists (a key in use is never replaced).
func NewPlatformKey(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return errdefs.New(errdefs.ErrAlreadyExists, "%s exists: a platform key in use is never replaced", path)
	}
	_, err := createPlatformKey(path)
	return err
}

func readPlatformKey(path string) (*keyset.Handle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seal: open platform key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal: stat platform key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition,
			"platform key file %s has mode %o; it must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(f))
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "platform key file %s is not a Tink keyset", path)
	}
	return h, nil
}

// createPlatformKey writes a new keyset to a temp file and links it into
// place: link fails if another process created path first, and then we read
// theirs.
func createPlatformKey(path string) (*keyset.Handle, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("seal: create platform key dir: %w", err)
	}
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("seal: generate platform key: %w", err)
	}
	f, err := os.CreateTemp(dir, ".platform-key-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("seal: create platform key file: %w", err)
	}
	defer os.Remove(f.Name())
	err = insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(f))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("seal: write platform key file: %w", err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		return readPlatformKey(path)
	} else if err != nil {
		return nil, fmt.Errorf("seal: install platform key file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return h, nil
}

// validKeyID accepts ids fit for manifests, logs and error messages.
func validKeyID(id string) error {
	// A tenant's key is kept as "<tenant>/<id>" (internal/tenant).
	if t, bare, scoped := strings.Cut(id, "/"); scoped {
		if err := validKeyID(t); err != nil || strings.Contains(bare, "/") {
			return errdefs.New(errdefs.ErrInvalidArgument, "customer key id %q is invalid: one tenant and one id", id)
		}
		id = bare
	}
	if id == "" || len(id) > maxKeyIDLen || strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r))
	}) >= 0 {
		return errdefs.New(errdefs.ErrInvalidArgument,
			"customer key id %q is invalid: use 1 to %d characters of A-Z a-z 0-9 . _ : -", id, maxKeyIDLen)
	}
	return nil
}

func newCustomerKEK(id string, key []byte) (kek, error) {
	if len(key) != KeySize {
		return kek{}, errdefs.New(errdefs.ErrInvalidArgument, "customer key %q is %d bytes; it must be %d (AES-256)", id, len(key), KeySize)
	}
	params, err := aesgcm.NewParameters(aesgcm.ParametersOpts{
		KeySizeInBytes: KeySize, IVSizeInBytes: 12, TagSizeInBytes: 16, Variant: aesgcm.VariantNoPrefix,
	})
	if err != nil {
		return kek{}, fmt.Errorf("seal: customer key parameters: %w", err)
	}
	k, err := aesgcm.NewKey(secretdata.NewBytesFromData(key, insecuresecretdataaccess.Token{}), 0, params)
	if err != nil {
		return kek{}, fmt.Errorf("seal: customer key %q: %w", id, err)
	}
	a, err := aesgcm.NewAEAD(k)
	if err != nil {
		return kek{}, fmt.Errorf("seal: customer key %q: %w", id, err)
	}
	return kek{fp: Fingerprint(key), aead: a}, nil
}

// Fingerprint is the short public id of a customer key version: the first 8
// bytes of HMAC-SHA256 keyed with the key over a fixed label, in hex. It
// identifies the key without revealing anything usable about it.
func Fingerprint(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("space/seal/fingerprint/v1"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// SetCustomerKey installs key (KeySize bytes) as the current version of
// customer key id, replacing every version held before. previous are older
// versions that may still have wrapped data keys: they unwrap but never wrap.
// The key bytes are not retained beyond the Tink primitive built from them;
// callers should zero their copy.
func (k *Keyring) SetCustomerKey(id string, key []byte, previous ...[]byte) error {
	if err := validKeyID(id); err != nil {
		return err
	}
	versions := make([]kek, 0, 1+len(previous))
	for _, b := range append([][]byte{key}, previous...) {
		v, err := newCustomerKEK(id, b)
		if err != nil {
			return err
		}
		versions = append(versions, v)
	}
	k.s.mu.Lock()
	k.s.customer[id] = versions
	k.s.mu.Unlock()
	return nil
}

// RotateCustomerKey makes newKey the current version of id and keeps the
// versions held so far for unwrapping. After Rewrap has moved every data key
// to the new version, SetCustomerKey(id, newKey) forgets the old ones.
func (k *Keyring) RotateCustomerKey(id string, newKey []byte) error {
	if err := validKeyID(id); err != nil {
		return err
	}
	v, err := newCustomerKEK(id, newKey)
	if err != nil {
		return err
	}
	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	old := k.s.customer[id]
	if len(old) == 0 {
		return missingKey(id)
	}
	versions := []kek{v}
	for _, o := range old {
		if o.fp != v.fp {
			versions = append(versions, o)
		}
	}
	k.s.customer[id] = versions
	return nil
}

// RemoveCustomerKey forgets every version of customer key id.
func (k *Keyring) RemoveCustomerKey(id string) {
	k.s.mu.Lock()
	delete(k.s.customer, id)
	k.s.mu.Unlock()
}

// HasKey reports whether key id can wrap; "" (the platform key) always can.
func (k *Keyring) HasKey(id string) bool {
	if id == "" {
		return true
	}
	k.s.mu.RLock()
	defer k.s.mu.RUnlock()
	return len(k.s.customer[id]) > 0
}

// Require is HasKey as an error that says which key is missing and how to
// supply it (errdefs.ErrFailedPrecondition wrapping ErrKeyMissing).
func (k *Keyring) Require(id string) error {
	if !k.HasKey(id) {
		return missingKey(id)
	}
	return nil
}

// String lists key ids and fingerprints, never key material.
func (k Keyring) String() string {
	if k.s == nil {
		return "seal.Keyring{}"
	}
	k.s.mu.RLock()
	defer k.s.mu.RUnlock()
	ids := make([]string, 0, len(k.s.customer))
	for id, vs := range k.s.customer {
		fps := make([]string, len(vs))
		for i, v := range vs {
			fps[i] = v.fp
		}
		ids = append(ids, id+"="+strings.Join(fps, ","))
	}
	sort.Strings(ids)
	return fmt.Sprintf("seal.Keyring{platform=%s customer=[%s]}", k.s.platform.fp, strings.Join(ids, " "))
}

// GoString keeps %#v as redacted as %v.
func (k Keyring) GoString() string { return k.String() }

// LogValue keeps slog output as redacted as String.
func (k Keyring) LogValue() slog.Value { return slog.StringValue(k.String()) }

// platformFingerprint names a key of the platform keyset by its Tink key id.
func platformFingerprint(id uint32) string { return fmt.Sprintf("platform-%08x", id) }

func missingKey(id string) error {
	return errdefs.Wrap(errdefs.ErrFailedPrecondition, ErrKeyMissing,
		"customer key %q is not loaded on this node: supply it (through the API or the key file the operator configured) and retry", id)
}
