package harness

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Bench runs `space bench` with args and --json against d and decodes the
// one JSON object it prints into out, failing t (with the tool's progress
// lines) when it does not end well or prints anything else. The suites
// run it to prove each benchmark works; none asserts a speed, so none
// waits for the host to settle (other suites run beside it).
func (d *Daemon) Bench(t testing.TB, out any, args ...string) {
	t.Helper()
	cmd := exec.Command(Bin(t, "space"), append(append([]string{"bench"}, args...), "--json", "--settle", "0")...)
	cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("space bench %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("bench: %s", raw)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("space bench %s printed no one JSON object: %v: %s", strings.Join(args, " "), err, raw)
	}
}
