// Package httpjson writes the JSON answers of spaced's HTTP layers (the
// native API, the E2B API, the console and the cluster's forwarder): one
// writer of JSON bodies and one of errors, whatever shape each API gives
// its error body.
package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Write answers status with v as JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Shape makes an error answer's body from its status, its code (an
// errdefs class name such as "not_found"), the message a client may see,
// and the details a client may act on (nil for none).
type Shape func(status int, code, message string, details any) any

// Native is the native API's error body (api/openapi.yaml's Error):
// {"error":{"code","message","details"}}.
func Native(_ int, code, message string, details any) any {
	return ErrorBody{Error: ErrorDetail{Code: code, Message: message, Details: details}}
}

// ErrorBody is the native API's error body.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what a native error says.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Details are for clients that act on the error (errdefs.WithDetails):
	// which node budget refused a create, for example.
	Details any `json:"details,omitempty"`
}

// WriteStatus answers an error of the given status and code in shape.
func WriteStatus(w http.ResponseWriter, shape Shape, status int, code, message string, details any) {
	Write(w, status, shape(status, code, message, details))
}

// WriteError answers err in shape: the status and code of its errdefs
// class, its public message (an internal cause is never shown), its
// details and its Retry-After. It answers the status it wrote, for the
// caller's log (this package logs nothing).
func WriteError(w http.ResponseWriter, shape Shape, err error) int {
	err = errdefs.NodeCondition(err)
	status, code := errdefs.HTTPStatus(err)
	if v := errdefs.RetryAfterHeader(err); v != "" {
		w.Header().Set("Retry-After", v)
	}
	WriteStatus(w, shape, status, code, errdefs.PublicMessage(err), errdefs.Details(err))
	return status
}

type loggerKey struct{}

// WithLogger answers ctx carrying log: the logger of the request it
// serves, which the API layers' error writers log to (see LoggerOf).
func WithLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

// LoggerOf answers the logger ctx carries, or one that discards.
func LoggerOf(ctx context.Context) *slog.Logger {
	if log, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return log
	}
	return slog.New(slog.DiscardHandler)
}

// WriteRequestError answers request r with err in shape (WriteError) and
// logs it to r's logger as api: a server error at error level, a refusal
// at debug. A request whose context was cancelled first (its client went
// away, or shut its side of the connection) is logged at debug as
// abandoned, whatever err says: the work it started was cut short by the
// client, not failed by the server. The answer is the same either way (a
// client that only shut its side still reads it). It answers the status
// it wrote.
func WriteRequestError(w http.ResponseWriter, r *http.Request, shape Shape, api string, err error) int {
	ctx := r.Context()
	log := LoggerOf(ctx)
	code := WriteError(w, shape, err)
	if errors.Is(ctx.Err(), context.Canceled) {
		log.DebugContext(ctx, api+" request abandoned by its client", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
		return code
	}
	if code >= 500 {
		log.ErrorContext(ctx, api+" request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	} else {
		log.DebugContext(ctx, api+" request refused", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	}
	return code
}
