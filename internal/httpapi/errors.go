package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/errdefs"
)

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Details are for clients that act on the error (errdefs.WithDetails):
	// which node budget refused a create, for example.
	Details any `json:"details,omitempty"`
}

// writeError answers with the JSON error body. Internal causes are logged,
// never shown.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = errdefs.NodeCondition(err)
	code, name := errdefs.HTTPStatus(err)
	msg := errdefs.PublicMessage(err)
	if code >= 500 {
		slog.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	} else {
		slog.DebugContext(r.Context(), "request refused", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(errorBody{Error: errorDetail{Code: name, Message: msg, Details: errdefs.Details(err)}})
}

// fromAgent classifies an error from a sandbox's agent. The agent is
// inside the sandbox, so its messages are shown only for the classes where
// they describe the caller's own request (a missing file, a bad argument).
func fromAgent(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent unreachable")
	}
	msg := truncate(ce.Message(), 512)
	switch ce.Code() {
	case connect.CodeNotFound:
		return errdefs.New(errdefs.ErrNotFound, "%s", msg)
	case connect.CodeInvalidArgument, connect.CodeOutOfRange, connect.CodeFailedPrecondition:
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case connect.CodeAlreadyExists:
		return errdefs.New(errdefs.ErrAlreadyExists, "%s", msg)
	case connect.CodePermissionDenied:
		return errdefs.New(errdefs.ErrPermissionDenied, "%s", msg)
	case connect.CodeUnauthenticated:
		// The agent only says this about the Linux user named in the request:
		// spaced always sends the right token.
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case connect.CodeResourceExhausted:
		return errdefs.New(errdefs.ErrResourceExhausted, "%s", msg)
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent unavailable")
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent failed")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
