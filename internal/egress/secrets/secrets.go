// Package secrets keeps the credentials the egress gateway injects into
// sandbox requests. Values are sealed with a Tink AEAD (AES-256-GCM). On
// one node its keyset lives in its own 0600 file and the sealed store is a
// 0600 JSON file; in a cluster both are in the catalog, the keyset itself
// sealed under the platform key (which only the nodes hold), so every node
// injects every secret. A value leaves this package only to the gateway,
// at the moment it is put into a request; it is never logged or returned
// by the API.
package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tink-crypto/tink-go/v2/aead"
	"github.com/tink-crypto/tink-go/v2/insecurecleartextkeyset"
	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/tink"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// Binding says where a secret may go, and how it is put in.
type Binding struct {
	// Host is the exact host name (normalised) requests must be for.
	Host string `json:"host"`
	// Port, when set, is the only destination port.
	Port uint16 `json:"port,omitempty"`
	// PathPrefix, when set, must start the request path.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Header, when set, is added to every request to the binding, with
	// HeaderFormat's "{secret}" replaced by the value.
	Header       string `json:"header,omitempty"`
	HeaderFormat string `json:"header_format,omitempty"`
}

// Meta is what may be shown of a secret.
type Meta struct {
	Name string `json:"name"`
	Binding
	Version   int       `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

type sealed struct {
	Meta
	Ciphertext []byte `json:"ciphertext"`
}

// ErrInvalid and ErrNotFound class this package's errors.
var (
	ErrInvalid  = errors.New("invalid secret")
	ErrNotFound = errors.New("secret not found")
)

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	headerRe = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// MaxValueLen bounds a secret's value.
const MaxValueLen = 16 << 10

// Store is the sealed secret store.
type Store struct {
	backend Backend
	aead    tink.AEAD

	mu      sync.Mutex
	secrets map[string]sealed
}

// Backend keeps the sealed secrets: a file on one node, the catalog in a
// cluster. A record is the JSON of a sealed secret.
type Backend interface {
	LoadSecrets() (map[string][]byte, error)
	PutSecret(name string, record []byte) error
	DeleteSecret(name string) error
}

// Open loads (or creates) the keyset and the store in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets dir: %w", err)
	}
	h, err := loadKeyset(filepath.Join(dir, "secrets.keyset.json"))
	if err != nil {
		return nil, err
	}
	return OpenWith(&fileBackend{path: filepath.Join(dir, "secrets.json")}, h)
}

// OpenWith opens a store on backend, sealing with keyset h.
func OpenWith(backend Backend, h *keyset.Handle) (*Store, error) {
	a, err := aead.New(h)
	if err != nil {
		return nil, fmt.Errorf("secrets AEAD: %w", err)
	}
	s := &Store{backend: backend, aead: a}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the secrets from the backend again (in a cluster, another
// node changed one).
func (s *Store) Reload() error {
	records, err := s.backend.LoadSecrets()
	if err != nil {
		return fmt.Errorf("read secrets: %w", err)
	}
	m := make(map[string]sealed, len(records))
	for name, r := range records {
		var v sealed
		if err := json.Unmarshal(r, &v); err != nil {
			return fmt.Errorf("decode secret %s: %w", name, err)
		}
		m[name] = v
	}
	s.mu.Lock()
	s.secrets = m
	s.mu.Unlock()
	return nil
}

// NewKeyset makes a secrets keyset (AES-256-GCM).
func NewKeyset() (*keyset.Handle, error) { return keyset.NewHandle(aead.AES256GCMKeyTemplate()) }

// EncodeKeyset and DecodeKeyset write and read a keyset in the clear:
// the caller seals what it stores (the platform key, in a cluster).
func EncodeKeyset(h *keyset.Handle) ([]byte, error) {
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf)); err != nil {
		return nil, fmt.Errorf("encode keyset: %w", err)
	}
	return buf.Bytes(), nil
}

func DecodeKeyset(b []byte) (*keyset.Handle, error) {
	h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(bytes.NewReader(b)))
	if err != nil {
		return nil, fmt.Errorf("read keyset: %w", err)
	}
	return h, nil
}

// fileBackend is one node's: every secret in one 0600 JSON file, written
// whole (and atomically) at each change.
type fileBackend struct {
	mu   sync.Mutex
	path string
}

func (f *fileBackend) load() (map[string]json.RawMessage, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]json.RawMessage{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode secrets: %w", err)
	}
	return m, nil
}

func (f *fileBackend) LoadSecrets() (map[string][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.load()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out, nil
}

func (f *fileBackend) change(fn func(map[string]json.RawMessage)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.load()
	if err != nil {
		return err
	}
	fn(m)
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode secrets: %w", err)
	}
	return writeFile(f.path, data)
}

func (f *fileBackend) PutSecret(name string, record []byte) error {
	return f.change(func(m map[string]json.RawMessage) { m[name] = record })
}

func (f *fileBackend) DeleteSecret(name string) error {
	return f.change(func(m map[string]json.RawMessage) { delete(m, name) })
}

// loadKeyset reads the platform keyset, or makes one (AES-256-GCM) and
// writes it 0600. It is the one key that opens every secret: whoever can
// read it and the store can read the secrets, as with any key file.
func loadKeyset(path string) (*keyset.Handle, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		h, err := insecurecleartextkeyset.Read(keyset.NewJSONReader(bytes.NewReader(data)))
		if err != nil {
			return nil, fmt.Errorf("read keyset %s: %w", path, err)
		}
		return h, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read keyset: %w", err)
	}
	h, err := keyset.NewHandle(aead.AES256GCMKeyTemplate())
	if err != nil {
		return nil, fmt.Errorf("new keyset: %w", err)
	}
	var buf bytes.Buffer
	if err := insecurecleartextkeyset.Write(h, keyset.NewJSONWriter(&buf)); err != nil {
		return nil, fmt.Errorf("encode keyset: %w", err)
	}
	if err := writeFile(path, buf.Bytes()); err != nil {
		return nil, err
	}
	return h, nil
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	return nil
}

// CheckName refuses names that could not be a secret's. A tenant's secret
// is kept as "<tenant>/<name>" (internal/tenant): each part is checked.
func CheckName(name string) error {
	if t, n, scoped := strings.Cut(name, "/"); scoped {
		if !nameRe.MatchString(t) {
			return fmt.Errorf("%w: tenant %q of secret %q is not valid", ErrInvalid, t, name)
		}
		name = n
	}
	if !nameRe.MatchString(name) {
		return fmt.Errorf("%w: name %q must be 1-63 of a-z, 0-9, '-' and '_'", ErrInvalid, name)
	}
	return nil
}

// Put creates or rotates a secret. Running sandboxes get the new value on
// their next request.
func (s *Store) Put(name, value string, b Binding) (Meta, error) {
	if err := CheckName(name); err != nil {
		return Meta{}, err
	}
	if value == "" || len(value) > MaxValueLen || strings.ContainsAny(value, "\r\n\x00") {
		return Meta{}, fmt.Errorf("%w: value must be 1-%d bytes without CR, LF or NUL", ErrInvalid, MaxValueLen)
	}
	host, err := policy.NormalizeName(b.Host)
	if err != nil {
		return Meta{}, fmt.Errorf("%w: host: %v", ErrInvalid, err)
	}
	b.Host = host
	if b.PathPrefix != "" && !strings.HasPrefix(b.PathPrefix, "/") {
		return Meta{}, fmt.Errorf("%w: path_prefix must start with /", ErrInvalid)
	}
	if b.Header != "" && !headerRe.MatchString(b.Header) {
		return Meta{}, fmt.Errorf("%w: header %q is not a header name", ErrInvalid, b.Header)
	}
	if b.Header == "" && b.HeaderFormat != "" {
		return Meta{}, fmt.Errorf("%w: header_format needs header", ErrInvalid)
	}
	if b.Header != "" && b.HeaderFormat == "" {
		b.HeaderFormat = "{secret}"
	}
	if b.HeaderFormat != "" && (!strings.Contains(b.HeaderFormat, "{secret}") || strings.ContainsAny(b.HeaderFormat, "\r\n\x00")) {
		return Meta{}, fmt.Errorf("%w: header_format must contain {secret} and no CR, LF or NUL", ErrInvalid)
	}
	ct, err := s.aead.Encrypt([]byte(value), []byte(name))
	if err != nil {
		return Meta{}, fmt.Errorf("seal secret: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Meta{Name: name, Binding: b, Version: s.secrets[name].Version + 1, UpdatedAt: time.Now().UTC()}
	v := sealed{Meta: m, Ciphertext: ct}
	rec, err := json.Marshal(v)
	if err != nil {
		return Meta{}, fmt.Errorf("encode secret: %w", err)
	}
	if err := s.backend.PutSecret(name, rec); err != nil {
		return Meta{}, fmt.Errorf("store secret: %w", err)
	}
	next := maps(s.secrets)
	next[name] = v
	s.secrets = next
	return m, nil
}

// Delete removes a secret; placeholders of it stop working at once.
func (s *Store) Delete(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.secrets[name]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err := s.backend.DeleteSecret(name); err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	next := maps(s.secrets)
	delete(next, name)
	s.secrets = next
	return nil
}

// List returns every secret's metadata, by name.
func (s *Store) List() []Meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Meta, 0, len(s.secrets))
	for _, v := range s.secrets {
		out = append(out, v.Meta)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns a secret's metadata.
func (s *Store) Get(name string) (Meta, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.secrets[name]
	return v.Meta, ok
}

// Open returns a secret's binding and value, for the gateway only.
func (s *Store) Open(name string) (Meta, string, error) {
	s.mu.Lock()
	v, ok := s.secrets[name]
	s.mu.Unlock()
	if !ok {
		return Meta{}, "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	pt, err := s.aead.Decrypt(v.Ciphertext, []byte(name))
	if err != nil {
		return Meta{}, "", fmt.Errorf("open secret %s: %w", name, err)
	}
	return v.Meta, string(pt), nil
}

func maps(in map[string]sealed) map[string]sealed {
	out := make(map[string]sealed, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "space-secret-"

// NewPlaceholder returns a fresh placeholder for secret name: what a
// sandbox sees instead of the value. It is random per sandbox, so one
// sandbox's placeholder is worth nothing in another.
func NewPlaceholder(name string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return PlaceholderPrefix + name + "-" + hex.EncodeToString(b)
}

// Seal encrypts another secret of the platform's (a webhook's signature
// secret) under the same keyset, bound to associated (its owner's id):
// what the caller stores is sealed as these secrets are.
func (s *Store) Seal(plaintext, associated []byte) ([]byte, error) {
	ct, err := s.aead.Encrypt(plaintext, associated)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return ct, nil
}

// Unseal decrypts what Seal sealed with the same associated data.
func (s *Store) Unseal(ciphertext, associated []byte) ([]byte, error) {
	pt, err := s.aead.Decrypt(ciphertext, associated)
	if err != nil {
		return nil, fmt.Errorf("unseal: %w", err)
	}
	return pt, nil
}
