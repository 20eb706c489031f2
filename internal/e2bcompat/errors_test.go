package e2bcompat

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"syscall"
	"testing"
)

func TestWriteErrorNoSpace(t *testing.T) {
	rec := httptest.NewRecorder()
	writeError(rec, httptest.NewRequest("POST", "/v2/sandboxes", nil), fmt.Errorf("write spec: %w", syscall.ENOSPC))
	var e errorJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 507 || e.Code != 507 || e.Message != "no space left on the node" {
		t.Errorf("got %d %+v, want 507 with the message", rec.Code, e)
	}
}
