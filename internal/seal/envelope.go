package seal

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/tink-crypto/tink-go/v2/keyset"
	"github.com/tink-crypto/tink-go/v2/streamingaead"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Sentinels under the errdefs classes, for callers that need to tell the
// cases apart. All three are wrapped in errdefs.ErrFailedPrecondition.
var (
	// ErrKeyMissing: the customer key that wrapped the data is not loaded.
	ErrKeyMissing = errors.New("seal: customer key not loaded")
	// ErrWrongKey: the key loaded under that id is not the one that wrapped
	// the data key (fingerprint mismatch or failed unwrap).
	ErrWrongKey = errors.New("seal: wrong key")
	// ErrAuth: ciphertext failed authentication: tampered, truncated, or
	// decrypted with other associated data than it was sealed with.
	ErrAuth = errors.New("seal: ciphertext failed authentication")
)

// WrappedKey is an artifact's data key encrypted under a KEK. It holds no
// secret in plain and is meant to be stored beside the artifact (JSON).
type WrappedKey struct {
	KeyID string `json:"key_id,omitempty"` // customer key id; "" = platform key
	KEK   string `json:"kek"`              // fingerprint of the KEK version that wrapped it
	// Ciphertext is the data keyset (Tink streaming AEAD) as a Tink
	// EncryptedKeyset, bound to KeyID as associated data.
	Ciphertext []byte `json:"ciphertext"`
}

// Encrypt starts sealing a stream to dst under a fresh data key wrapped by the
// current version of keyID ("" = platform key). Write the plaintext to the
// returned writer and Close it to finish the stream (Close does not close
// dst). Encrypt writes the stream header to dst before it returns, so dst
// must not block on a reader that starts later (an io.Pipe read after
// Encrypt returns deadlocks). Keep the WrappedKey and associatedData: Decrypt needs both.
func (k *Keyring) Encrypt(dst io.Writer, keyID string, associatedData []byte) (io.WriteCloser, WrappedKey, error) {
	kek, err := k.current(keyID)
	if err != nil {
		return nil, WrappedKey{}, err
	}
	h, err := keyset.NewHandle(streamingaead.AES256GCMHKDF1MBKeyTemplate())
	if err != nil {
		return nil, WrappedKey{}, fmt.Errorf("seal: generate data key: %w", err)
	}
	var buf bytes.Buffer
	if err := h.WriteWithAssociatedData(keyset.NewBinaryWriter(&buf), kek.aead, wrapAD(keyID)); err != nil {
		return nil, WrappedKey{}, fmt.Errorf("seal: wrap data key: %w", err)
	}
	p, err := streamingaead.New(h)
	if err != nil {
		return nil, WrappedKey{}, fmt.Errorf("seal: data key primitive: %w", err)
	}
	w, err := p.NewEncryptingWriter(dst, associatedData)
	if err != nil {
		return nil, WrappedKey{}, fmt.Errorf("seal: start encryption: %w", err)
	}
	return w, WrappedKey{KeyID: keyID, KEK: kek.fp, Ciphertext: buf.Bytes()}, nil
}

// Decrypt opens a stream sealed by Encrypt. The reader returns only
// authenticated plaintext, one segment (1 MiB) at a time: a tampered or
// truncated stream fails with an error wrapping ErrAuth at the segment where
// it is detected, so consume the plaintext as final only once the reader has
// returned io.EOF. Errors of src pass through.
func (k *Keyring) Decrypt(src io.Reader, wk WrappedKey, associatedData []byte) (io.Reader, error) {
	h, err := k.unwrap(wk)
	if err != nil {
		return nil, err
	}
	p, err := streamingaead.New(h)
	if err != nil {
		return nil, fmt.Errorf("seal: data key primitive: %w", err)
	}
	sr := &srcReader{r: src}
	r, err := p.NewDecryptingReader(sr, associatedData)
	if err != nil {
		return nil, fmt.Errorf("seal: start decryption: %w", err)
	}
	return &authReader{r: r, src: sr}, nil
}

// Rewrap re-encrypts the data key of wk under the current version of its key
// id. The data it protects is untouched. A wk already under the current
// version is returned as is.
func (k *Keyring) Rewrap(wk WrappedKey) (WrappedKey, error) {
	kek, err := k.current(wk.KeyID)
	if err != nil {
		return WrappedKey{}, err
	}
	if wk.KEK == kek.fp {
		return wk, nil
	}
	h, err := k.unwrap(wk)
	if err != nil {
		return WrappedKey{}, err
	}
	var buf bytes.Buffer
	if err := h.WriteWithAssociatedData(keyset.NewBinaryWriter(&buf), kek.aead, wrapAD(wk.KeyID)); err != nil {
		return WrappedKey{}, fmt.Errorf("seal: rewrap data key: %w", err)
	}
	return WrappedKey{KeyID: wk.KeyID, KEK: kek.fp, Ciphertext: buf.Bytes()}, nil
}

// NeedsRewrap reports whether wk is wrapped by another version than the
// current one of its key id (false when that key is not loaded).
func (k *Keyring) NeedsRewrap(wk WrappedKey) bool {
	kek, err := k.current(wk.KeyID)
	return err == nil && kek.fp != wk.KEK
}

func wrapAD(keyID string) []byte { return []byte("space/seal/wrap/v1\x00" + keyID) }

// current is the KEK version that wraps new data keys for keyID.
func (k *Keyring) current(keyID string) (kek, error) {
	k.s.mu.RLock()
	defer k.s.mu.RUnlock()
	if keyID == "" {
		return k.s.platform, nil
	}
	vs := k.s.customer[keyID]
	if len(vs) == 0 {
		return kek{}, missingKey(keyID)
	}
	return vs[0], nil
}

// unwrap finds the KEK version that wrapped wk and decrypts the data keyset.
func (k *Keyring) unwrap(wk WrappedKey) (*keyset.Handle, error) {
	kek, err := k.version(wk)
	if err != nil {
		return nil, err
	}
	r := keyset.NewBinaryReader(bytes.NewReader(wk.Ciphertext))
	h, err := keyset.ReadWithAssociatedData(r, kek.aead, wrapAD(wk.KeyID))
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, fmt.Errorf("%w: %w", ErrWrongKey, err),
			"the data key wrapped by %s (key fingerprint %s) does not unwrap: wrong key or corrupted wrapped key", keyName(wk.KeyID), wk.KEK)
	}
	return h, nil
}

func (k *Keyring) version(wk WrappedKey) (kek, error) {
	k.s.mu.RLock()
	defer k.s.mu.RUnlock()
	if wk.KeyID == "" {
		if !k.s.platformIDs[wk.KEK] {
			return kek{}, errdefs.Wrap(errdefs.ErrFailedPrecondition, ErrWrongKey,
				"the data key was wrapped by platform key %s, which this node's platform key file does not hold (it has %s): point every node at the same key file", wk.KEK, k.s.platform.fp)
		}
		return k.s.platform, nil
	}
	vs := k.s.customer[wk.KeyID]
	if len(vs) == 0 {
		return kek{}, missingKey(wk.KeyID)
	}
	for _, v := range vs {
		if v.fp == wk.KEK {
			return v, nil
		}
	}
	return kek{}, errdefs.Wrap(errdefs.ErrFailedPrecondition, ErrWrongKey,
		"customer key %q loaded here (fingerprint %s) is not the version that wrapped the data (fingerprint %s): supply that key, as current or previous version", wk.KeyID, vs[0].fp, wk.KEK)
}

func keyName(id string) string {
	if id == "" {
		return "the platform key"
	}
	return fmt.Sprintf("customer key %q", id)
}

// srcReader remembers whether the ciphertext source itself failed, so that an
// I/O error is not reported as tampering (Tink's keyset-level reader replaces
// errors in the first segment with its own "no matching key").
type srcReader struct {
	r   io.Reader
	err error
}

func (s *srcReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

type authReader struct {
	r   io.Reader
	src *srcReader
	err error
}

func (a *authReader) Read(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	n, err := a.r.Read(p)
	switch {
	case err == nil, err == io.EOF:
		return n, err
	case a.src.err != nil:
		a.err = a.src.err
	default:
		a.err = errdefs.Wrap(errdefs.ErrFailedPrecondition, fmt.Errorf("%w: %w", ErrAuth, err),
			"encrypted data failed authentication: it was tampered with, truncated, or belongs to another artifact")
	}
	return n, a.err
}
