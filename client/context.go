package client

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// ContextUpload says what UploadContext did.
type ContextUpload struct {
	// Hash names the file set in builds (BuildRequest.Context).
	Hash  string
	Files int
	Bytes int64
	// Uploaded is false when the daemon had it already.
	Uploaded bool
}

// UploadContext tars the build context dir (without what its .dockerignore
// excludes) and uploads it unless the daemon has it.
func (c *Client) UploadContext(ctx context.Context, dir string) (*ContextUpload, error) {
	tmp, err := os.CreateTemp("", "space-context-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := WriteContext(dir, io.MultiWriter(tmp, h))
	if err != nil {
		return nil, err
	}
	up := &ContextUpload{Hash: hex.EncodeToString(h.Sum(nil)), Files: n}
	if up.Bytes, err = tmp.Seek(0, io.SeekCurrent); err != nil {
		return nil, err
	}
	if ok, err := c.HasFiles(ctx, up.Hash); err != nil || ok {
		return up, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	up.Uploaded = true
	return up, c.PutFiles(ctx, up.Hash, tmp, up.Bytes)
}

// WriteContext writes the files of dir that .dockerignore keeps as a tar
// (names relative to dir, ids and times zeroed so equal trees hash equal)
// and returns how many entries it wrote.
func WriteContext(dir string, w io.Writer) (int, error) {
	var pm *patternmatcher.PatternMatcher
	if f, err := os.Open(filepath.Join(dir, ".dockerignore")); err == nil {
		patterns, err := ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			return 0, fmt.Errorf(".dockerignore: %w", err)
		}
		if pm, err = patternmatcher.New(patterns); err != nil {
			return 0, fmt.Errorf(".dockerignore: %w", err)
		}
	}
	tw := tar.NewWriter(w)
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if pm != nil {
			if skip, _ := pm.MatchesOrParentMatches(rel); skip {
				if d.IsDir() && !pm.Exclusions() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices: not part of a context
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n++
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("context %s: %w", dir, err)
	}
	return n, tw.Close()
}
