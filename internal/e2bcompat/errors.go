package e2bcompat

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/httpjson"
)

// writeError answers with E2B's error body, {"code": <status>, "message"}.
// The SDKs need both fields; the JS SDK tells a 404 by the body's code.
// Internal causes are logged, never shown.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	httpjson.WriteRequestError(w, r, e2bShape, "e2b", err)
}

// e2bShape is E2B's Error body.
func e2bShape(status int, _, message string, details any) any {
	return errorJSON{Code: status, Message: message, Details: details}
}

// writeStatus answers with an error body for a status chosen here.
func writeStatus(w http.ResponseWriter, code int, msg string) {
	httpjson.WriteStatus(w, e2bShape, code, "", msg, nil)
}

func writeJSON(w http.ResponseWriter, code int, v any) { httpjson.Write(w, code, v) }

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
		return errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxErr.Limit)
	case errors.As(err, &typ):
		return errdefs.New(errdefs.ErrInvalidArgument, "field %q must be %s, not %s", typ.Field, typ.Type, typ.Value)
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON: %v", err)
}
