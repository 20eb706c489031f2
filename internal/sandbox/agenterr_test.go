package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestFromAgent: the agent's errors become classes, and its own message is
// shown only where it is about the caller's request.
func TestFromAgent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		class error
		msg   string
	}{
		{"not found", connect.NewError(connect.CodeNotFound, errors.New("path '/x' does not exist")), errdefs.ErrNotFound, "path '/x' does not exist"},
		{"bad argument", connect.NewError(connect.CodeInvalidArgument, errors.New("cwd '/nope' does not exist")), errdefs.ErrInvalidArgument, "cwd '/nope' does not exist"},
		{"unknown user", connect.NewError(connect.CodeUnauthenticated, errors.New("user bob not found")), errdefs.ErrInvalidArgument, "user bob not found"},
		{"long message", connect.NewError(connect.CodeNotFound, errors.New(strings.Repeat("x", 600))), errdefs.ErrNotFound, strings.Repeat("x", maxAgentMessage-3) + "..."},
		{"agent failed", connect.NewError(connect.CodeInternal, errors.New("secret detail")), errdefs.ErrUnavailable, "sandbox agent failed"},
		{"agent gone", connect.NewError(connect.CodeUnavailable, errors.New("secret detail")), errdefs.ErrUnavailable, "sandbox agent unavailable"},
		{"unreachable", fmt.Errorf("dial: %w", errors.New("connection refused")), errdefs.ErrUnavailable, "sandbox agent unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromAgent(tc.err)
			if !errors.Is(got, tc.class) || errdefs.PublicMessage(got) != tc.msg {
				t.Errorf("%v: class %v, message %q; want %v, %q", tc.err, errdefs.Class(got), errdefs.PublicMessage(got), tc.class, tc.msg)
			}
		})
	}
	if fromAgent(nil) != nil {
		t.Error("nil became an error")
	}
	if err := fromAgent(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled request became %v", err)
	}
}

func TestFromAgentHTTP(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		class  error
		msg    string
	}{
		{404, `{"message":"path '/x' does not exist"}`, errdefs.ErrNotFound, "path '/x' does not exist"},
		{400, `{"message":"path '/d' is a directory"}`, errdefs.ErrInvalidArgument, "path '/d' is a directory"},
		{507, `{}`, errdefs.ErrNoSpace, "Insufficient Storage"},
		{416, `{"message":"whatever"}`, errdefs.ErrInvalidArgument, "range not satisfiable"},
		{500, `{"message":"secret detail"}`, errdefs.ErrUnavailable, "sandbox agent failed"},
	} {
		rec := httptest.NewRecorder()
		rec.WriteHeader(tc.status)
		rec.WriteString(tc.body)
		got := fromAgentHTTP(rec.Result())
		if !errors.Is(got, tc.class) || errdefs.PublicMessage(got) != tc.msg {
			t.Errorf("%d %s: class %v, message %q; want %v, %q", tc.status, tc.body, errdefs.Class(got), errdefs.PublicMessage(got), tc.class, tc.msg)
		}
	}
}
