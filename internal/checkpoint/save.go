package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// Save uploads every regular file in dir as an artifact of checkpoint m.ID,
// encrypted under m.KeyID, seals secret (may be nil) into the manifest, and
// writes the manifest last. It fills m.Version, m.Artifacts, m.Sealed,
// m.Bytes and m.Took, and m.CreatedAt if zero. On failure it deletes what
// it uploaded (best effort; SweepIncomplete gets the rest) and the
// checkpoint is not restorable.
func (r *Repo) Save(ctx context.Context, m *Manifest, dir string, secret []byte) (err error) {
	start := time.Now()
	if err := validName("checkpoint id", m.ID, maxIDLen); err != nil {
		return err
	}
	if !kinds[m.Kind] {
		return errdefs.New(errdefs.ErrInvalidArgument, "checkpoint kind %q is not known", m.Kind)
	}
	if err := r.keys.Require(m.KeyID); err != nil { // before any upload starts
		return fmt.Errorf("save checkpoint %s: %w", m.ID, err)
	}
	names, err := listFiles(dir)
	if err != nil {
		return err
	}

	r.mu.Lock()
	r.inflight[m.ID]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.inflight[m.ID]--; r.inflight[m.ID] == 0 {
			delete(r.inflight, m.ID)
		}
		r.mu.Unlock()
	}()

	if _, err := r.store.Stat(ctx, r.manifestKey(m.ID)); err == nil {
		return errdefs.New(errdefs.ErrAlreadyExists, "checkpoint %s already exists", m.ID)
	} else if errdefs.Class(err) != errdefs.ErrNotFound {
		return storeErr(err, "save checkpoint %s", m.ID)
	}
	defer func() {
		if err != nil {
			// Manifest first: a manifest PUT that failed ambiguously may
			// have landed.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if r.store.Delete(cctx, r.manifestKey(m.ID)) == nil {
				r.deleteObjects(cctx, m.ID)
			}
		}
	}()

	arts, err := r.uploadAll(ctx, m, dir, names)
	if err != nil {
		return err
	}
	m.Version = ManifestVersion
	if m.CreatedAt.IsZero() {
		m.CreatedAt = time.Now()
	}
	m.CreatedAt = m.CreatedAt.UTC()
	m.Artifacts, m.Bytes = arts, 0
	for _, a := range arts {
		m.Bytes += a.Size
	}
	m.Took = time.Since(start)
	if m.Sealed, err = r.seal(m, secret); err != nil {
		return err
	}
	b, err := encodeManifest(m)
	if err != nil {
		return err
	}
	if _, err := r.store.Put(ctx, r.manifestKey(m.ID), bytes.NewReader(b), int64(len(b))); err != nil {
		return storeErr(err, "write manifest of checkpoint %s", m.ID)
	}
	if err := r.indexPut(ctx, m.ID, b); err != nil {
		// Not indexed, the checkpoint would be invisible: it is undone
		// (the deferred cleanup) and the save fails.
		if r.index != nil {
			r.index.DeleteManifest(context.WithoutCancel(ctx), r.prefix, m.ID)
		}
		return err
	}
	return nil
}

func encodeManifest(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest of checkpoint %s: %w", m.ID, err)
	}
	return b, nil
}

// listFiles names the regular files of dir. Anything else there would be
// silently missing from the restore, so it is refused.
func listFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read image dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "image dir %s holds %s, which is not a regular file", dir, e.Name())
		}
		if err := validName("artifact name", e.Name(), maxNameLen); err != nil {
			return nil, err
		}
		names = append(names, e.Name())
	}
	if len(names) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "image dir %s is empty", dir)
	}
	return names, nil
}

// partSize is the largest piece of a file uploaded as one artifact. A
// bigger file (a sandbox's memory) goes up in parts that are encrypted and
// written in parallel, so a pause uses every core instead of one stream.
var partSize int64 = 32 << 20

// piece is the part of a file in dir that one artifact holds.
type piece struct {
	file        string // the file in dir
	name        string // the artifact's name: file, or file.partNNNN
	off, length int64
	parted      bool
}

// pieces cuts the files of dir into what uploadAll sends.
func pieces(dir string, names []string) ([]piece, error) {
	var out []piece
	taken := map[string]bool{}
	for _, n := range names {
		taken[n] = true
	}
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("read image dir: %w", err)
		}
		if fi.Size() <= partSize {
			out = append(out, piece{file: n, name: n, length: fi.Size()})
			continue
		}
		for i, off := 0, int64(0); off < fi.Size(); i, off = i+1, off+partSize {
			name := fmt.Sprintf("%s.part%04d", n, i)
			if taken[name] || validName("artifact name", name, maxNameLen) != nil {
				return nil, errdefs.New(errdefs.ErrInvalidArgument, "image dir %s: %s cannot be cut into parts named %s", dir, n, name)
			}
			taken[name] = true
			out = append(out, piece{file: n, name: name, off: off, length: min(partSize, fi.Size()-off), parted: true})
		}
	}
	return out, nil
}

// uploadAll uploads names from dir, parallel at most at once; the first
// failure cancels the rest.
func (r *Repo) uploadAll(ctx context.Context, m *Manifest, dir string, names []string) ([]Artifact, error) {
	ps, err := pieces(dir, names)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	arts := make([]Artifact, len(ps))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			a, err := r.upload(ctx, m.ID, m.KeyID, dir, p)
			if err != nil {
				cancel(err)
				return
			}
			arts[i] = a
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	slices.SortFunc(arts, func(a, b Artifact) int { return strings.Compare(a.Name, b.Name) })
	return arts, nil
}

// upload streams one piece of a file through encryption into the store.
func (r *Repo) upload(ctx context.Context, id, keyID, dir string, p piece) (Artifact, error) {
	f, err := os.Open(filepath.Join(dir, p.file))
	if err != nil {
		return Artifact{}, fmt.Errorf("checkpoint %s: open %s: %w", id, p.file, err)
	}
	defer f.Close()
	// Encrypt writes the stream header at once, so it runs on the pipe's
	// writing side, concurrently with Put reading.
	type result struct {
		n   int64
		wk  seal.WrappedKey
		err error
	}
	done := make(chan result, 1)
	pr, pw := io.Pipe()
	go func() {
		var res result
		defer func() { pw.CloseWithError(res.err); done <- res }() // nil: EOF
		w, wk, err := r.keys.Encrypt(pw, keyID, artifactAD(id, p.name))
		if err != nil {
			res.err = err
			return
		}
		res.wk = wk
		src := io.NewSectionReader(f, p.off, p.length)
		if res.n, res.err = io.CopyBuffer(w, src, make([]byte, 1<<20)); res.err == nil {
			res.err = w.Close()
		}
	}()
	info, err := r.store.Put(ctx, r.artifactKey(id, p.name), pr, -1)
	pr.CloseWithError(io.ErrClosedPipe) // stops the copy if Put gave up early
	res := <-done
	if err != nil {
		return Artifact{}, storeErr(err, "upload %s of checkpoint %s", p.name, id)
	}
	if res.err == nil && res.n != p.length {
		res.err = fmt.Errorf("read %d bytes, want %d (the file changed)", res.n, p.length)
	}
	if res.err != nil { // cannot happen once Put read to EOF, but never trust a short artifact
		return Artifact{}, fmt.Errorf("checkpoint %s: read %s: %w", id, p.name, res.err)
	}
	a := Artifact{Name: p.name, Size: info.Size, PlainSize: res.n, SHA256: info.SHA256, WrappedKey: res.wk}
	if p.parted {
		a.File, a.Offset = p.file, p.off
	}
	return a, nil
}

// seal encrypts secret under m's key, bound to m's digest. The digest is
// taken of m as Load will see it, decoded from JSON.
func (r *Repo) seal(m *Manifest, secret []byte) (*Sealed, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest of checkpoint %s: %w", m.ID, err)
	}
	var decoded Manifest
	if err := json.Unmarshal(b, &decoded); err != nil {
		return nil, fmt.Errorf("decode manifest of checkpoint %s: %w", m.ID, err)
	}
	digest, err := decoded.digest()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	w, wk, err := r.keys.Encrypt(&out, m.KeyID, sealedAD(m.ID, digest))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", m.ID, err)
	}
	if _, err := w.Write(secret); err != nil {
		return nil, fmt.Errorf("seal checkpoint %s: %w", m.ID, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("seal checkpoint %s: %w", m.ID, err)
	}
	return &Sealed{Data: out.Bytes(), WrappedKey: wk}, nil
}

// readLimited reads r to EOF, refusing more than max bytes.
func readLimited(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "object is larger than %d bytes", max)
	}
	return b, nil
}
