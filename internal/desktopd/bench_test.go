package desktopd

import (
	"net/http"
	"strings"
	"testing"
)

// The server alone on a real Xvfb at 1024x768 (no spaced, no sandbox):
// go test -run '^$' -bench . ./internal/desktopd/. test/desktop's
// TestDesktopNative/bench measures the same through spaced and gVisor.

func BenchmarkScreenshot(b *testing.B) {
	srv := newServer(b, xvfb(b, "1024x768x24"), "")
	for b.Loop() {
		resp, err := http.Get(srv.URL + "/screenshot")
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp)
		}
		resp.Body.Close()
	}
}

func BenchmarkClick(b *testing.B) {
	srv := newServer(b, xvfb(b, "1024x768x24"), "")
	for b.Loop() {
		resp, err := http.Post(srv.URL+"/actions", "application/json", strings.NewReader(`{"action":"left_click","coordinate":[500,400]}`))
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp)
		}
		resp.Body.Close()
	}
}
