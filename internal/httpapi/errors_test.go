package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestWriteErrorNoSpace(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		status    int
		code, msg string
	}{
		{"unclassified ENOSPC", fmt.Errorf("write spec: %w", &os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}), 507, "resource_exhausted", "no space left on the node"},
		{"unclassified EDQUOT", fmt.Errorf("x: %w", syscall.EDQUOT), 507, "resource_exhausted", "no space left on the node"},
		{"classified stays", errdefs.Wrap(errdefs.ErrNotFound, syscall.ENOSPC, "gone"), 404, "not_found", "gone"},
		{"other internal", fmt.Errorf("boom"), 500, "internal", "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeError(rec, httptest.NewRequest("POST", "/v1/sandboxes", nil), tt.err)
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tt.status || body.Error.Code != tt.code || body.Error.Message != tt.msg {
				t.Errorf("got %d %+v, want %d %s %q", rec.Code, body.Error, tt.status, tt.code, tt.msg)
			}
		})
	}
}
