// Package errdefs holds the error classes shared by every layer. Code below
// the edge wraps one of these sentinels with %w; only httpapi (and the E2B
// layer) turn a class into an HTTP status.
package errdefs

import (
	"errors"
	"fmt"
	"time"
)

// Classes. Wrap them; compare with errors.Is.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnavailable        = errors.New("unavailable")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrNoSpace            = errors.New("no space left")
	ErrTooLarge           = errors.New("too large")
	// ErrQuotaExceeded: the caller's tenant is at one of its quotas.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrCapacity: the node is at one of its budgets (memory, disk,
	// sandboxes); another node, or this one later, can serve the request.
	ErrCapacity = errors.New("node at capacity")
)

// classified is an error whose client-facing message is separate from the
// cause that gets logged.
type classified struct {
	class   error
	message string
	cause   error
	details any
}

func (e *classified) Error() string {
	if e.cause != nil {
		return e.message + ": " + e.cause.Error()
	}
	return e.message
}

func (e *classified) Is(target error) bool { return target == e.class }
func (e *classified) Unwrap() error        { return e.cause }

// New returns an error of class with a message fit for clients.
func New(class error, format string, args ...any) error {
	return &classified{class: class, message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error of class whose client message is message and whose
// cause (logged, not shown) is cause.
func Wrap(class error, cause error, format string, args ...any) error {
	return &classified{class: class, message: fmt.Sprintf(format, args...), cause: cause}
}

// WithDetails returns an error of class with a message fit for clients and
// details, a value both APIs add to the error body as JSON ("details"), for
// clients that act on the error rather than show it.
func WithDetails(class error, details any, format string, args ...any) error {
	return &classified{class: class, message: fmt.Sprintf(format, args...), details: details}
}

// Details is what the outermost classified error of err holds for the
// error body, or nil.
func Details(err error) any {
	var c *classified
	if errors.As(err, &c) {
		return c.details
	}
	return nil
}

// PublicMessage is what a client may see of err: the message of the outermost
// classified error, or a generic text for unclassified (internal) errors.
func PublicMessage(err error) string {
	var c *classified
	if errors.As(err, &c) {
		return c.message
	}
	return "internal error"
}

var classes = []error{ErrNotFound, ErrAlreadyExists, ErrInvalidArgument, ErrFailedPrecondition,
	ErrResourceExhausted, ErrUnavailable, ErrUnauthenticated, ErrPermissionDenied, ErrNoSpace, ErrTooLarge, ErrCapacity, ErrQuotaExceeded}

// Class returns the class of err, or nil for an internal error. The
// outermost classified error decides: the code that wrapped last knew best
// what the failure means for the caller (a damaged checkpoint whose cause
// is a missing object is a failed precondition, not a not-found). A bare
// sentinel wrapped with %w counts where no classified error does.
func Class(err error) error {
	var c *classified
	if errors.As(err, &c) {
		return c.class
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// retryable is an error that says when its request may be tried again.
type retryable struct {
	err   error
	after time.Duration
}

func (e *retryable) Error() string { return e.err.Error() }
func (e *retryable) Unwrap() error { return e.err }

// Retryable returns err with a hint that the same request may succeed after
// d (a rate limit's wait): both APIs send it as a Retry-After header.
func Retryable(err error, d time.Duration) error { return &retryable{err: err, after: d} }

// RetryAfter is the wait of the Retryable hint in err, or 0. Like the
// details, the hint belongs to its classified error: one wrapped in an outer
// class of its own has none.
func RetryAfter(err error) time.Duration {
	var r *retryable
	if !errors.As(err, &r) {
		return 0
	}
	var outer, inner *classified
	errors.As(err, &outer)
	errors.As(r.err, &inner)
	if outer != inner {
		return 0
	}
	return r.after
}
