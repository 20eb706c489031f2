package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		body        string
		wantCode    string
		wantMessage string
		is          func(error) bool
	}{
		{"not found", 404, `{"error":{"code":"not_found","message":"sandbox \"x\" not found"}}`, CodeNotFound, `sandbox "x" not found`, IsNotFound},
		{"failed precondition", 409, `{"error":{"code":"failed_precondition","message":"sandbox is killed"}}`, CodeFailedPrecondition, "sandbox is killed", IsFailedPrecondition},
		{"disk full", 507, `{"error":{"code":"resource_exhausted","message":"disk full"}}`, CodeResourceExhausted, "disk full", IsResourceExhausted},
		{"bad request", 400, `{"error":{"code":"invalid_argument","message":"cpu too large"}}`, CodeInvalidArgument, "cpu too large", IsInvalidArgument},
		{"plain text 404 from a proxy", 404, "no route\n", "http_404", "no route", IsNotFound},
		{"html 503", 503, "<html>down</html>", "http_503", "HTTP 503 Service Unavailable", IsUnavailable},
		{"empty 502", 502, "", "http_502", "HTTP 502 Bad Gateway", func(err error) bool { return ErrorStatus(err) == 502 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			})
			_, err := c.GetSandbox(context.Background(), "x")
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if apiErr.Status != tt.status || apiErr.Code != tt.wantCode || apiErr.Message != tt.wantMessage {
				t.Errorf("got %+v", apiErr)
			}
			if !tt.is(err) {
				t.Errorf("predicate false for %v", err)
			}
			if ErrorCode(err) != tt.wantCode {
				t.Errorf("ErrorCode = %q", ErrorCode(err))
			}
		})
	}
}

func TestBadKeyIsUnauthenticated(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {})
	c.apiKey = "wrong"
	err := c.KillSandbox(context.Background(), "x")
	if !IsUnauthenticated(err) || IsNotFound(err) {
		t.Fatalf("err = %v", err)
	}
}

func TestInvalidAddr(t *testing.T) {
	c := New("http://", "k")
	if _, err := c.GetSandbox(context.Background(), "x"); err == nil {
		t.Fatal("want an error for an empty host")
	}
}
