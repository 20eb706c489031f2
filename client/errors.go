package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error codes the daemon answers with (see the description of api/openapi.yaml).
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeUnauthenticated    = "unauthenticated"
	CodePermissionDenied   = "permission_denied"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeFailedPrecondition = "failed_precondition"
	CodeTooLarge           = "too_large"
	CodeResourceExhausted  = "resource_exhausted"
	CodeUnavailable        = "unavailable"
	// CodeNodeAtCapacity (503): the node is at its memory, disk or sandbox
	// budget; try later or another node.
	CodeNodeAtCapacity = "node_at_capacity"
	CodeInternal       = "internal"
)

// APIError is an error answer of the daemon: {"error":{"code","message"}}.
// Methods wrap it with context; find it with errors.As or the Is* helpers.
type APIError struct {
	Status  int    // HTTP status
	Code    string // one of the Code* constants, or "http_<status>" when the body was not an API error
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
}

// decodeError reads an error answer. A body that is not the API's error JSON
// (a proxy's HTML page, say) still yields an APIError with the status.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &APIError{Status: resp.StatusCode}
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	e.Code = fmt.Sprintf("http_%d", resp.StatusCode)
	msg := strings.TrimSpace(string(b))
	if msg == "" || len(msg) > 512 || strings.HasPrefix(msg, "<") {
		msg = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	e.Message = msg
	return e
}

// ErrorCode returns the API error code in err's chain, or "" if there is none.
func ErrorCode(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrorStatus returns the HTTP status of the API error in err's chain, or 0.
func ErrorStatus(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func isCode(err error, code string, status int) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	return e.Code == code || (status != 0 && e.Status == status && strings.HasPrefix(e.Code, "http_"))
}

// IsNotFound reports whether err is a not_found (404) answer.
func IsNotFound(err error) bool { return isCode(err, CodeNotFound, http.StatusNotFound) }

// IsUnauthenticated reports whether the API key was missing or wrong (401).
func IsUnauthenticated(err error) bool {
	return isCode(err, CodeUnauthenticated, http.StatusUnauthorized)
}

// IsPermissionDenied reports whether the key may not do this (403).
func IsPermissionDenied(err error) bool {
	return isCode(err, CodePermissionDenied, http.StatusForbidden)
}

// IsInvalidArgument reports whether the request was malformed (400).
func IsInvalidArgument(err error) bool {
	return isCode(err, CodeInvalidArgument, http.StatusBadRequest)
}

// IsAlreadyExists reports an already_exists answer (409).
func IsAlreadyExists(err error) bool { return isCode(err, CodeAlreadyExists, 0) }

// IsFailedPrecondition reports a failed_precondition answer (409), such as a
// command on a sandbox that is not running.
func IsFailedPrecondition(err error) bool { return isCode(err, CodeFailedPrecondition, 0) }

// IsResourceExhausted reports a quota, rate or disk limit (429 or 507).
func IsResourceExhausted(err error) bool { return isCode(err, CodeResourceExhausted, 0) }

// IsUnavailable reports that the daemon cannot serve now (503); retrying later may work.
func IsUnavailable(err error) bool {
	return isCode(err, CodeUnavailable, http.StatusServiceUnavailable)
}
