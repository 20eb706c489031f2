package fault

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/bench"
	"github.com/spacesandbox/space/test/harness"
)

// TestSoakShort is the CI form of the soak (`space bench --soak`): 100
// create -> exec -> write -> read -> kill cycles, 8 at a time, against a
// spaced with a warm pool. Every cycle must succeed and spaced's open
// descriptors must be flat between the first and last quarter of the run.
// Its RSS figure is logged but not asserted: over 100 cycles it is mostly
// the Go heap's pacing (the full 1,000-cycle run is in docs/benchmarks.md).
func TestSoakShort(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "soak", CIDR: "10.246.80.0/20", Pool: "base=8:16"})
	cmd := exec.Command(harness.Bin(t, "space"), "bench", "--soak", "--cycles", "100", "--concurrency", "8", "--json", "--settle", "0")
	cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var res bench.SoakResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("space bench --soak: %v; output %q: %v\n%s", runErr, out, err, stderr.String())
	}
	t.Logf("soak: %s", out)
	if res.Errors != 0 {
		t.Errorf("%d failed steps; first: %v", res.Errors, res.FirstErrors)
	}
	for _, step := range []string{"create", "exec", "write", "read", "kill"} {
		if f, ok := res.Steps[step]; !ok || f.P50 <= 0 {
			t.Errorf("step %s: %+v", step, f)
		}
	}
	if res.First.Samples == 0 || res.Last.Samples == 0 {
		t.Errorf("no daemon samples in a window: first %+v, last %+v", res.First, res.Last)
	}
	if !res.FDsFlat {
		t.Errorf("spaced's open fds grew: %.0f in the first %d cycles, %.0f in the last (%s)", res.First.OpenFDs, res.Window, res.Last.OpenFDs, res.Tolerance)
	}
}
