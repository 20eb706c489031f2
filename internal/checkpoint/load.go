package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Load verifies checkpoint id and restores its artifacts as files in dir,
// returning its manifest and the secret sealed by Save. A checkpoint
// without a manifest fails with errdefs.ErrNotFound, or with ErrIncomplete
// when artifacts of it exist. Every byte is authenticated: a tampered,
// swapped or truncated artifact fails with a checksum or authentication
// error, and on any failure the files Load created in dir are removed.
func (r *Repo) Load(ctx context.Context, id, dir string) (*Manifest, []byte, error) {
	m, err := r.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	// The sealed section first: it proves the manifest intact and the key
	// present before gigabytes are downloaded.
	secret, err := r.open(m)
	if err != nil {
		return nil, nil, err
	}
	if err := r.downloadAll(ctx, m, dir); err != nil {
		return nil, nil, err
	}
	return m, secret, nil
}

func (r *Repo) open(m *Manifest) ([]byte, error) {
	digest, err := m.digest()
	if err != nil {
		return nil, err
	}
	pr, err := r.keys.Decrypt(bytes.NewReader(m.Sealed.Data), m.Sealed.WrappedKey, sealedAD(m.ID, digest))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", m.ID, err)
	}
	secret, err := io.ReadAll(pr)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err,
			"the manifest of checkpoint %s does not verify (altered, or sealed for another checkpoint)", m.ID)
	}
	return secret, nil
}

// downloadAll writes the files of m into dir: each to a temp file, every
// artifact (whole file or part) at its offset, parallel at most at once;
// the files are renamed into place only once every byte is verified.
func (r *Repo) downloadAll(ctx context.Context, m *Manifest, dir string) error {
	temps := map[string]*os.File{} // by target file
	defer func() {
		for _, f := range temps {
			f.Close()
			os.Remove(f.Name()) // fails harmlessly after the rename
		}
	}()
	for _, a := range m.Artifacts {
		t := a.target()
		if temps[t] != nil {
			continue
		}
		f, err := os.CreateTemp(dir, ".partial-"+t+"-*")
		if err != nil {
			return storeErr(err, "restore %s of checkpoint %s", t, m.ID)
		}
		temps[t] = f
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, a := range m.Artifacts {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if err := r.download(ctx, m, a, io.NewOffsetWriter(temps[a.target()], a.Offset)); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for t, f := range temps {
		err := f.Close()
		if err == nil {
			err = os.Rename(f.Name(), filepath.Join(dir, t))
		}
		if err != nil {
			return storeErr(err, "restore %s of checkpoint %s", t, m.ID)
		}
	}
	return nil
}

// download writes one verified artifact to w. The AEAD stream
// authenticates every byte (each segment's tag, its place in the stream,
// the stream's end, and the checkpoint and artifact it was sealed for), so
// the store's own SHA-256 pass is skipped: it was 40% of a Load's CPU.
func (r *Repo) download(ctx context.Context, m *Manifest, a Artifact, w io.Writer) error {
	rc, info, err := r.store.GetAuthenticated(ctx, r.artifactKey(m.ID, a.Name))
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "checkpoint %s is damaged: artifact %s is missing from the store", m.ID, a.Name)
	}
	if err != nil {
		return storeErr(err, "download %s of checkpoint %s", a.Name, m.ID)
	}
	defer rc.Close()
	if info.Size != a.Size || info.SHA256 != a.SHA256 {
		return errdefs.New(errdefs.ErrFailedPrecondition,
			"checkpoint %s is damaged: stored artifact %s (%d bytes, sha256 %s) is not the one its manifest lists (%d bytes, sha256 %s)",
			m.ID, a.Name, info.Size, info.SHA256, a.Size, a.SHA256)
	}
	plain, err := r.keys.Decrypt(rc, a.WrappedKey, artifactAD(m.ID, a.Name))
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", m.ID, err)
	}
	n, err := io.CopyBuffer(w, plain, make([]byte, 1<<20))
	if err == nil && n != a.PlainSize {
		err = errdefs.New(errdefs.ErrFailedPrecondition, "artifact has %d bytes, its manifest says %d", n, a.PlainSize)
	}
	if err != nil {
		return storeErr(err, "restore %s of checkpoint %s", a.Name, m.ID)
	}
	return nil
}
