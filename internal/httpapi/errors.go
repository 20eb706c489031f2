package httpapi

import (
	"net/http"

	"github.com/spacesandbox/space/internal/httpjson"
)

// errorBody and errorDetail are the native API's error body (the tests
// decode answers into it).
type (
	errorBody   = httpjson.ErrorBody
	errorDetail = httpjson.ErrorDetail
)

// writeError answers with the JSON error body. Internal causes are logged,
// never shown.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := httpjson.WriteError(w, httpjson.Native, err)
	if code >= 500 {
		httpjson.LoggerOf(r.Context()).ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	} else {
		httpjson.LoggerOf(r.Context()).DebugContext(r.Context(), "request refused", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) { httpjson.Write(w, code, v) }
