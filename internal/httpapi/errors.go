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
	httpjson.WriteRequestError(w, r, httpjson.Native, "native", err)
}

func writeJSON(w http.ResponseWriter, code int, v any) { httpjson.Write(w, code, v) }
