package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"regexp"

	"github.com/spacesandbox/space/internal/errdefs"
)

var hashRE = regexp.MustCompile(`^[a-f0-9]{64}$`)

// PutFiles stores an uploaded file set (a tar, gzip or not: a build
// context, one COPY's files, or an image archive) under hash. With verify
// the hash must be the SHA-256 of the bytes (the native API's rule); E2B's
// SDKs compute theirs over file names and contents, so for them it is a
// name. At most max bytes are read, and none that would take the node's
// disk below its floor; an upload of a hash already stored is read and
// dropped.
func (s *Service) PutFiles(ctx context.Context, hash string, body io.Reader, verify bool, max int64) error {
	if !hashRE.MatchString(hash) {
		return errdefs.New(errdefs.ErrInvalidArgument, "file hash %q is not 64 lowercase hex digits", hash)
	}
	tmp, err := os.CreateTemp(s.art.work, "upload-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(s.guardDisk(tmp), h), io.LimitReader(body, max+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errdefs.Class(err) != nil {
			return err // over the route's limit, or the node's disk is full
		}
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "upload interrupted: %v", err)
	}
	if n > max {
		return errdefs.New(errdefs.ErrTooLarge, "the upload is larger than the limit of %d bytes (SPACE_TEMPLATE_MAX_UPLOAD)", max)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); verify && sum != hash {
		return errdefs.New(errdefs.ErrInvalidArgument, "the upload's SHA-256 is %s, not %s", sum, hash)
	}
	if ok, err := s.HasFiles(ctx, hash); err != nil || ok {
		return err
	}
	return s.art.saveFiles(ctx, filesKey(ctx, hash), tmp.Name())
}
