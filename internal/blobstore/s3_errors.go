package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/spacesandbox/space/internal/errdefs"
)

// classify turns an SDK error into an errdefs class. The SDK has already
// retried (with backoff) whatever was retryable by the time we see it.
func (s *S3) classify(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("blobstore: s3 %s %q: %w", op, key, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return errdefs.Wrap(errdefs.ErrNotFound, err, "object %q not found", key)
		case "NoSuchBucket":
			return errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "bucket %q does not exist at %s", s.opts.Bucket, s.where)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
			return errdefs.Wrap(errdefs.ErrPermissionDenied, err, "object store at %s refused the credentials", s.where)
		case "SlowDown", "ServiceUnavailable", "InternalError":
			return s.unavailable(err)
		}
	}
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) {
		switch code := resp.HTTPStatusCode(); {
		case code == 404:
			return errdefs.Wrap(errdefs.ErrNotFound, err, "object %q not found", key)
		case code >= 500:
			return s.unavailable(err)
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return s.unavailable(err)
	}
	return fmt.Errorf("blobstore: s3 %s %q at %s: %w", op, key, s.where, err)
}

func (s *S3) unavailable(err error) error {
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "object store at %s is unreachable", s.where)
}
