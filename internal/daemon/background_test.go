package daemon

import (
	"strings"
	"testing"
	"time"
)

func TestBackgroundWait(t *testing.T) {
	var b background
	release := make(chan struct{})
	b.Go("quick", func() {})
	b.Go("stuck", func() { <-release })
	err := b.Wait(50 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "stuck") || strings.Contains(err.Error(), "quick") {
		t.Fatalf("Wait with one part stuck: %v, want it named alone", err)
	}
	close(release)
	if err := b.Wait(5 * time.Second); err != nil {
		t.Fatalf("Wait once every part ended: %v", err)
	}
}
