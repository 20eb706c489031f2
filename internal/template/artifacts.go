package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
)

// artifacts keeps what builds make and use in the object store, under
// templates/, through checkpoint.Repo (encrypted, checksummed, manifest
// last): a step's layer under its cache key, an uploaded file set under
// its hash, a started template's checkpoint under its start key. Every
// node sharing the store reuses them. Local copies live in work/.
type artifacts struct {
	repo *checkpoint.Repo
	work string
}

func layerID(key string) string  { return "layer-" + key }
func filesID(hash string) string { return "files-" + hash }
func startID(key string) string  { return "start-" + key }

const (
	layerName = "layer.tar.zst"
	filesName = "files.tar"
)

// hasLayer reports whether the layer of key is stored (complete).
func (a *artifacts) has(ctx context.Context, id string) (bool, error) {
	_, err := a.repo.Get(ctx, id)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, checkpoint.ErrIncomplete) {
		return false, nil
	}
	return false, err
}

// saveLayer compresses the plain tar at path and stores it as the layer
// of key. A layer stored meanwhile by another build is as good.
func (a *artifacts) saveLayer(ctx context.Context, key, path string) (int64, error) {
	dir, err := os.MkdirTemp(a.work, "layer-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := compressFile(path, filepath.Join(dir, layerName)); err != nil {
		return 0, err
	}
	m := &checkpoint.Manifest{ID: layerID(key), Kind: checkpoint.KindLayer, SandboxID: "template"}
	err = a.repo.Save(ctx, m, dir, nil)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return 0, nil
	}
	return m.Bytes, err
}

// openLayer fetches the layer of key and returns it as a plain tar stream;
// closing it removes the local copy.
func (a *artifacts) openLayer(ctx context.Context, key string) (io.ReadCloser, error) {
	dir, err := os.MkdirTemp(a.work, "fetch-")
	if err != nil {
		return nil, err
	}
	if _, _, err := a.repo.Load(ctx, layerID(key), dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("layer %s: %w", key, err)
	}
	f, err := os.Open(filepath.Join(dir, layerName))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	zr, err := zstd.NewReader(f)
	if err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return &cleanupReader{Reader: zr, close: func() { zr.Close(); f.Close(); os.RemoveAll(dir) }}, nil
}

type cleanupReader struct {
	io.Reader
	close func()
}

func (c *cleanupReader) Close() error { c.close(); return nil }

func compressFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	zw, err := zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	if _, err := io.Copy(zw, in); err != nil {
		zw.Close()
		return fmt.Errorf("compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress layer: %w", err)
	}
	return out.Close()
}

// filesPath is the local copy of file set hash, fetched if needed.
func (a *artifacts) filesPath(ctx context.Context, hash string) (string, error) {
	local := filepath.Join(a.work, "files", hash+".tar")
	if _, err := os.Stat(local); err == nil {
		return local, nil
	}
	dir, err := os.MkdirTemp(a.work, "fetch-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if _, _, err := a.repo.Load(ctx, filesID(hash), dir); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return "", errdefs.New(errdefs.ErrInvalidArgument, "no uploaded files with hash %s: upload them before the build", hash)
		}
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(dir, filesName), local); err != nil {
		return "", err
	}
	return local, nil
}

// saveFiles stores the upload at path (removed or moved) as file set
// hash, and keeps it as the local copy.
func (a *artifacts) saveFiles(ctx context.Context, hash, path string) error {
	dir, err := os.MkdirTemp(a.work, "files-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Rename(path, filepath.Join(dir, filesName)); err != nil {
		return err
	}
	m := &checkpoint.Manifest{ID: filesID(hash), Kind: checkpoint.KindFiles, SandboxID: "template"}
	if err := a.repo.Save(ctx, m, dir, nil); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return err
	}
	local := filepath.Join(a.work, "files", hash+".tar")
	if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, filesName), local)
}

// saveStart stores a started template's checkpoint image (dir) with the
// token its agent holds, sealed.
func (a *artifacts) saveStart(ctx context.Context, key, dir, token string) (int64, error) {
	m := &checkpoint.Manifest{ID: startID(key), Kind: checkpoint.KindStart, SandboxID: "template"}
	err := a.repo.Save(ctx, m, dir, []byte(token))
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return 0, nil
	}
	return m.Bytes, err
}

// loadStart fetches a started template's checkpoint into dir and returns
// its agent's token.
func (a *artifacts) loadStart(ctx context.Context, key, dir string) (string, error) {
	_, secret, err := a.repo.Load(ctx, startID(key), dir)
	if err != nil {
		return "", err
	}
	return string(secret), nil
}
