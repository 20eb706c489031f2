package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB that notes a skip or a failure instead of
// stopping the goroutine, so that both outcomes can be looked at.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestSkip(t *testing.T) {
	t.Setenv(StrictEnv, "")
	var r recorder
	Skipf(&r, "no %s here", "runsc")
	if r.skipped != "no runsc here" || r.failed != "" {
		t.Errorf("without strict mode: skipped %q, failed %q; want a skip", r.skipped, r.failed)
	}

	t.Setenv(StrictEnv, "1")
	r = recorder{}
	Skip(&r, "no runsc here")
	if r.skipped != "" || !strings.Contains(r.failed, "no runsc here") || !strings.Contains(r.failed, StrictEnv) {
		t.Errorf("strict: skipped %q, failed %q; want a failure naming the reason and %s", r.skipped, r.failed, StrictEnv)
	}
}

func TestUnavailable(t *testing.T) {
	var out strings.Builder
	stderr = &out
	t.Cleanup(func() { stderr = os.Stderr })
	t.Setenv(StrictEnv, "1")
	if Unavailable("pkg", "") {
		t.Error("strict, nothing missing: told to stop")
	}
	if !Unavailable("pkg", "no runsc") {
		t.Error("strict, runsc missing: not told to stop")
	}
	t.Setenv(StrictEnv, "")
	if Unavailable("pkg", "no runsc") {
		t.Error("not strict: told to stop; the tests should skip one by one")
	}
	if got := out.String(); got != "pkg: FAIL: cannot run: no runsc (SPACE_TEST_STRICT=1: a missing dependency is a failure; unset it to skip)\npkg: skipping: no runsc\n" {
		t.Errorf("printed %q", got)
	}
}

func TestChecks(t *testing.T) {
	t.Setenv("SPACE_RUNSC", "/nonexistent/runsc")
	t.Setenv("SPACE_TEMPLATES_DIR", t.TempDir())
	if r := CheckRunsc(); !strings.Contains(r, "/nonexistent/runsc") {
		t.Errorf("CheckRunsc = %q, want it to name the path", r)
	}
	if r := CheckTemplate(); r == "" {
		t.Error("CheckTemplate passes on an empty templates dir")
	}
	if r := CheckCommand("sh"); r != "" {
		t.Errorf("CheckCommand(sh) = %q", r)
	}
	if r := CheckCommand("space-no-such-tool"); r == "" {
		t.Error("CheckCommand passes for a missing tool")
	}
	if got := First("", "b", "c"); got != "b" {
		t.Errorf("First = %q, want b", got)
	}
}
