package errdefs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

func TestClassAndMessage(t *testing.T) {
	cause := errors.New("runsc: exit status 1: secret detail")
	tests := []struct {
		name    string
		err     error
		class   error
		message string
	}{
		{"new", New(ErrNotFound, "sandbox %q not found", "x"), ErrNotFound, `sandbox "x" not found`},
		{"wrap hides cause", Wrap(ErrUnavailable, cause, "sandbox engine failed"), ErrUnavailable, "sandbox engine failed"},
		{"wrapped with %w", fmt.Errorf("create: %w", New(ErrInvalidArgument, "bad cpu")), ErrInvalidArgument, "bad cpu"},
		{"internal", cause, nil, "internal error"},
		// A damaged checkpoint whose cause is a missing object is the
		// outer class: 409, not 404.
		{"outermost wins", Wrap(ErrFailedPrecondition, New(ErrNotFound, "object missing"), "checkpoint is damaged"), ErrFailedPrecondition, "checkpoint is damaged"},
		{"bare sentinel", fmt.Errorf("lookup: %w", ErrNotFound), ErrNotFound, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Class(tt.err); got != tt.class {
				t.Errorf("Class = %v, want %v", got, tt.class)
			}
			if got := PublicMessage(tt.err); got != tt.message {
				t.Errorf("PublicMessage = %q, want %q", got, tt.message)
			}
		})
	}
	if !errors.Is(Wrap(ErrUnavailable, cause, "x"), cause) {
		t.Error("cause not reachable through errors.Is")
	}
}

func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{New(ErrNotFound, "x"), 404, "not_found"},
		{New(ErrAlreadyExists, "x"), 409, "already_exists"},
		{New(ErrInvalidArgument, "x"), 400, "invalid_argument"},
		{New(ErrFailedPrecondition, "x"), 409, "failed_precondition"},
		{Wrap(ErrFailedPrecondition, New(ErrNotFound, "gone"), "damaged"), 409, "failed_precondition"},
		{New(ErrResourceExhausted, "x"), 429, "resource_exhausted"},
		{New(ErrNoSpace, "x"), 507, "resource_exhausted"},
		{fmt.Errorf("write: %w", syscall.ENOSPC), 507, "resource_exhausted"},
		{New(ErrTooLarge, "x"), 413, "too_large"},
		{New(ErrUnavailable, "x"), 503, "unavailable"},
		{WithDetails(ErrCapacity, map[string]int{"used": 1}, "x"), 503, "node_at_capacity"},
		{fmt.Errorf("create: %w", New(ErrCapacity, "x")), 503, "node_at_capacity"},
		{New(ErrUnauthenticated, "x"), 401, "unauthenticated"},
		{New(ErrPermissionDenied, "x"), 403, "permission_denied"},
		{errors.New("boom"), 500, "internal"},
	} {
		if status, code := HTTPStatus(tc.err); status != tc.status || code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
		}
	}
}

func TestDetails(t *testing.T) {
	d := map[string]int{"budget": 2}
	err := fmt.Errorf("create: %w", WithDetails(ErrCapacity, d, "full"))
	if got, ok := Details(err).(map[string]int); !ok || got["budget"] != 2 {
		t.Errorf("Details = %v", Details(err))
	}
	if PublicMessage(err) != "full" || Class(err) != ErrCapacity {
		t.Errorf("message %q class %v", PublicMessage(err), Class(err))
	}
	// The outermost classified error decides, details included.
	if Details(Wrap(ErrUnavailable, err, "outer")) != nil {
		t.Error("details leak through an outer class")
	}
	if Details(errors.New("x")) != nil {
		t.Error("details of an internal error")
	}
}

func TestRetryAfter(t *testing.T) {
	limited := func(d time.Duration) error {
		return Retryable(WithDetails(ErrResourceExhausted, map[string]int{"burst": 2}, "slow down"), d)
	}
	for _, tc := range []struct {
		name   string
		err    error
		after  time.Duration
		header string
	}{
		{"under a second rounds up", limited(1500 * time.Millisecond), 1500 * time.Millisecond, "2"},
		{"a whole second stays", limited(2 * time.Second), 2 * time.Second, "2"},
		{"a millisecond is a second", limited(time.Millisecond), time.Millisecond, "1"},
		{"wrapped with %w", fmt.Errorf("create: %w", limited(300*time.Millisecond)), 300 * time.Millisecond, "1"},
		// An outer class is another answer: the hint was not its.
		{"outer class drops it", Wrap(ErrUnavailable, limited(time.Second), "outer"), 0, ""},
		{"no hint", New(ErrResourceExhausted, "x"), 0, ""},
		{"zero wait", limited(0), 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryAfter(tc.err); got != tc.after {
				t.Errorf("RetryAfter = %v, want %v", got, tc.after)
			}
			if got := RetryAfterHeader(tc.err); got != tc.header {
				t.Errorf("RetryAfterHeader = %q, want %q", got, tc.header)
			}
		})
	}
	// The hint keeps the class, message and details.
	err := limited(time.Second)
	if Class(err) != ErrResourceExhausted || PublicMessage(err) != "slow down" || Details(err) == nil {
		t.Errorf("class %v message %q details %v", Class(err), PublicMessage(err), Details(err))
	}
}
