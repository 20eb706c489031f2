package checkpoint

import (
	"bytes"
	"context"
)

// SetPartSize makes files larger than n go up in parts of n until the
// returned func is called.
func SetPartSize(n int64) (restore func()) {
	old := partSize
	partSize = n
	return func() { partSize = old }
}

// RewriteAs stores m again as version v, sealed anew with secret: what an
// older spaced wrote.
func (r *Repo) RewriteAs(ctx context.Context, m *Manifest, v int, secret []byte) error {
	c := *m
	c.Version = v
	s, err := r.seal(&c, secret)
	if err != nil {
		return err
	}
	c.Sealed = s
	b, err := encodeManifest(&c)
	if err != nil {
		return err
	}
	_, err = r.store.Put(ctx, r.manifestKey(c.ID), bytes.NewReader(b), int64(len(b)))
	return err
}
