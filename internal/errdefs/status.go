package errdefs

import (
	"errors"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// HTTPStatus is the status and error code both APIs (native and E2B)
// answer for err: one table, so the two never disagree.
func HTTPStatus(err error) (int, string) {
	switch Class(NodeCondition(err)) {
	case ErrNotFound:
		return http.StatusNotFound, "not_found"
	case ErrAlreadyExists:
		return http.StatusConflict, "already_exists"
	case ErrInvalidArgument:
		return http.StatusBadRequest, "invalid_argument"
	case ErrFailedPrecondition:
		return http.StatusConflict, "failed_precondition"
	case ErrResourceExhausted:
		return http.StatusTooManyRequests, "resource_exhausted"
	case ErrNoSpace:
		return http.StatusInsufficientStorage, "resource_exhausted"
	case ErrTooLarge:
		return http.StatusRequestEntityTooLarge, "too_large"
	case ErrUnavailable:
		return http.StatusServiceUnavailable, "unavailable"
	case ErrCapacity:
		return http.StatusServiceUnavailable, "node_at_capacity"
	case ErrUnauthenticated:
		return http.StatusUnauthorized, "unauthenticated"
	case ErrPermissionDenied:
		return http.StatusForbidden, "permission_denied"
	case ErrQuotaExceeded:
		return http.StatusForbidden, "quota_exceeded"
	}
	return http.StatusInternalServerError, "internal"
}

// NodeCondition classes an unclassified error caused by a full disk on the
// node (ENOSPC or EDQUOT from any layer below) as ErrNoSpace: a full disk
// is the node's condition, answered 507, never an "internal error".
func NodeCondition(err error) error {
	if Class(err) == nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return Wrap(ErrNoSpace, err, "no space left on the node")
	}
	return err
}

// RetryAfterHeader is the Retry-After header both APIs send for err: its
// Retryable wait in whole seconds, rounded up (so a client that waits that
// long is not refused again for the same reason), or "" for none.
func RetryAfterHeader(err error) string {
	d := RetryAfter(err)
	if d <= 0 {
		return ""
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
