package templates

import (
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// TestBenchTemplatesQuick proves `space bench --templates` works (and its
// raw runsc restore anchor), as TestBenchQuick does for the create
// figures; it asserts no speed. The code interpreter's figures are
// measured where its template is built (test/interpreter).
func TestBenchTemplatesQuick(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "bench", CIDR: "10.247.36.0/22", Pool: "bench-http=1:1"})
	var res map[string]any
	d.Bench(t, &res, "--templates", "--quick", "--interpreter", "", "--runsc", testenv.Runsc(), "--templates-dir", testenv.TemplatesDir())
	for _, k := range []string{"rebuild_p50", "rebuild_p90", "http_first_answer_p50", "http_first_answer_p90", "http_create_p50",
		"raw_restore_p50", "restore_overhead_ratio", "http_pooled_first_answer_p50", "http_pooled_first_answer_p90"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Errorf("figure %s = %v (missing or not positive)", k, v)
		}
	}
	if res["rebuild_steps"] != float64(10) {
		t.Errorf("rebuild_steps = %v, want 10", res["rebuild_steps"])
	}
}
