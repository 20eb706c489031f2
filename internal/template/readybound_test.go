package template

import (
	"testing"
	"time"
)

// E2B's wait_for_timeout(10_000) is the ready command "sleep 10": with the
// plain 10 s bound per check it could never finish, and the build failed
// (or waited for its ready timeout).
func TestCheckBound(t *testing.T) {
	for script, want := range map[string]time.Duration{
		"sleep 10":        20 * time.Second,
		" sleep 1 ":       11 * time.Second,
		"sleep 10; false": readyCheckBound,
		"test -e /tmp/x":  readyCheckBound,
		"sleep 999999":    readyCheckBound,
		"sleep -1":        readyCheckBound,
	} {
		if got := checkBound(script); got != want {
			t.Errorf("%q: %s, want %s", script, got, want)
		}
	}
}
