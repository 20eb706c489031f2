package seal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// sealedBytes is a small value sealed under the platform key.
type sealedBytes struct {
	Key  WrappedKey `json:"key"`
	Data []byte     `json:"data"`
}

// SealBytes seals a small value under the platform key (a fresh data key
// wrapped by it), bound to associatedData; OpenBytes opens it on any node
// that holds the same platform key.
func (k *Keyring) SealBytes(plain, associatedData []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, wk, err := k.Encrypt(&buf, "", associatedData)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(plain); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return json.Marshal(sealedBytes{Key: wk, Data: buf.Bytes()})
}

// OpenBytes opens what SealBytes sealed.
func (k *Keyring) OpenBytes(sealed, associatedData []byte) ([]byte, error) {
	var b sealedBytes
	if err := json.Unmarshal(sealed, &b); err != nil {
		return nil, fmt.Errorf("seal: decode sealed bytes: %w", err)
	}
	r, err := k.Decrypt(bytes.NewReader(b.Data), b.Key, associatedData)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}
