package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"

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
	if v := errdefs.RetryAfterHeader(err); v != "" {
		w.Header().Set("Retry-After", v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(errorBody{Error: errorDetail{Code: name, Message: msg, Details: errdefs.Details(err)}})
}
