package fault

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestShutdownDestroysLeftovers: the harness's backstop. A sandbox that
// spaced did not end before it stopped (here spaced is killed, so the
// shutdown's kills cannot reach it) is found in the daemon's runsc state,
// destroyed, and named in the shutdown's error; its processes are gone.
func TestShutdownDestroysLeftovers(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "leftovers", CIDR: "10.246.176.0/20"})
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		out, _ := exec.Command("pgrep", "-f", "runsc-sandbox.*"+sb.ID).Output()
		return strings.TrimSpace(string(out)) != ""
	}
	if !running() {
		t.Fatal("control: no runsc-sandbox process for the new sandbox")
	}
	d.Kill9() // its sandboxes outlive it, by design
	// This leftover is made on purpose: kept out of scripts/test.sh's list
	// of the ones a suite left by accident.
	t.Setenv("SPACE_TEST_LEFTOVERS", "")
	err = d.Shutdown()
	t.Logf("shutdown: %v", err)
	if err == nil || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("the shutdown did not name the leftover %s: %v", sb.ID, err)
	}
	for deadline := time.Now().Add(10 * time.Second); running() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if running() {
		t.Errorf("sandbox %s still runs after the shutdown", sb.ID)
	}
	// Own's cleanup starts it again to shut it down; nothing is left then.
}
