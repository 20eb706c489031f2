package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestWriteError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		says   string
		hides  string
	}{
		{"not found", errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", "x"), 404, "not_found", `sandbox "x" not found`, ""},
		{"bad input", errdefs.New(errdefs.ErrInvalidArgument, "cpu must be at most 64"), 400, "invalid_argument", "cpu", ""},
		{"internal cause hidden", errors.New("open /var/lib/space/secret: permission denied"), 500, "internal", "", "/var/lib/space"},
		{"wrapped cause hidden", errdefs.Wrap(errdefs.ErrUnavailable, errors.New("dial 10.0.0.7"), "catalog down"), 503, "unavailable", "catalog down", "10.0.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if got := WriteError(rec, Native, tc.err); got != tc.status {
				t.Errorf("answered %d, want %d", got, tc.status)
			}
			var body ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.says) {
				t.Errorf("got %d %+v, want %d %s saying %q", rec.Code, body.Error, tc.status, tc.code, tc.says)
			}
			if tc.hides != "" && strings.Contains(rec.Body.String(), tc.hides) {
				t.Errorf("body shows the internal cause: %s", rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestShape: the body is what the shape makes of the error (E2B's here).
func TestShape(t *testing.T) {
	e2b := func(status int, _, msg string, _ any) any {
		return map[string]any{"code": status, "message": msg}
	}
	rec := httptest.NewRecorder()
	WriteError(rec, e2b, errdefs.New(errdefs.ErrNotFound, "gone"))
	if got := strings.TrimSpace(rec.Body.String()); got != `{"code":404,"message":"gone"}` {
		t.Fatalf("body %s", got)
	}
}

// TestWriteRequestError: a server error is logged at error level and a
// refusal at debug; a request whose client went away is logged at debug,
// never as a server error, whatever the error says, and answered as any
// other (a client that only shut its side of the connection reads it).
func TestWriteRequestError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		gone    bool
		status  int
		level   string
		logSays string
	}{
		{"server error", errors.New("disk on fire"), false, 500, "ERROR", "native request failed"},
		{"refusal", errdefs.New(errdefs.ErrNotFound, "no such sandbox"), false, 404, "DEBUG", "native request refused"},
		{"client gone", context.Canceled, true, 500, "DEBUG", "native request abandoned by its client"},
		{"client gone, unavailable", errdefs.Wrap(errdefs.ErrUnavailable, context.Canceled, "agent did not answer"), true, 503, "DEBUG", "abandoned"},
		{"client gone, refusal", errdefs.New(errdefs.ErrUnauthenticated, "no key"), true, 401, "DEBUG", "abandoned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx, cancel := context.WithCancel(WithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			defer cancel()
			if tc.gone {
				cancel()
			}
			r := httptest.NewRequest("POST", "/v1/sandboxes", nil).WithContext(ctx)
			rec := httptest.NewRecorder()
			if got := WriteRequestError(rec, r, Native, "native", tc.err); got != tc.status || rec.Code != tc.status {
				t.Errorf("answered %d (recorded %d), want %d", got, rec.Code, tc.status)
			}
			if line := logs.String(); !strings.Contains(line, "level="+tc.level) || !strings.Contains(line, tc.logSays) {
				t.Errorf("logged %q, want level %s saying %q", line, tc.level, tc.logSays)
			}
		})
	}
}
