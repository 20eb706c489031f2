package e2bcompat

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"syscall"

	"github.com/spacesandbox/space/internal/errdefs"
)

// statusOf maps an error class to the HTTP status E2B uses for it.
func statusOf(err error) int {
	switch errdefs.Class(err) {
	case errdefs.ErrNotFound:
		return http.StatusNotFound
	case errdefs.ErrAlreadyExists, errdefs.ErrFailedPrecondition:
		return http.StatusConflict
	case errdefs.ErrInvalidArgument:
		return http.StatusBadRequest
	case errdefs.ErrResourceExhausted:
		return http.StatusTooManyRequests
	case errdefs.ErrNoSpace:
		return http.StatusInsufficientStorage
	case errdefs.ErrUnavailable:
		return http.StatusServiceUnavailable
	case errdefs.ErrUnauthenticated:
		return http.StatusUnauthorized
	case errdefs.ErrPermissionDenied:
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// writeError answers with E2B's error body, {"code": <status>, "message"}.
// The SDKs need both fields; the JS SDK tells a 404 by the body's code.
// Internal causes are logged, never shown.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = noSpace(err)
	code := statusOf(err)
	if code >= 500 {
		slog.ErrorContext(r.Context(), "e2b request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	writeJSON(w, code, errorJSON{Code: code, Message: errdefs.PublicMessage(err)})
}

// writeStatus answers with an error body for a status chosen here.
func writeStatus(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorJSON{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

const maxJSONBody = 1 << 20

// decodeJSON reads a JSON body. Unknown fields are ignored, as E2B's newer
// SDKs add fields over time; an empty body is allowed when optional.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	err := dec.Decode(v)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) && optional:
		return nil
	case errors.Is(err, io.EOF):
		return errdefs.New(errdefs.ErrInvalidArgument, "request body is empty; expected a JSON object")
	}
	var maxErr *http.MaxBytesError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return errdefs.New(errdefs.ErrInvalidArgument, "request body is larger than %d bytes", maxJSONBody)
	case errors.As(err, &typ):
		return errdefs.New(errdefs.ErrInvalidArgument, "field %q must be %s, not %s", typ.Field, typ.Type, typ.Value)
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON: %v", err)
}

// noSpace classes an unclassified error caused by a full disk on the node
// (ENOSPC or EDQUOT from any layer below) as ErrNoSpace: a full disk is the
// node's condition, answered 507, never an "internal error".
func noSpace(err error) error {
	if errdefs.Class(err) == nil && (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return errdefs.Wrap(errdefs.ErrNoSpace, err, "no space left on the node")
	}
	return err
}
