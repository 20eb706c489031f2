package errdefs

import (
	"errors"
	"fmt"
	"testing"
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
