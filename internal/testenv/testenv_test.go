package testenv

import (
	"fmt"
	"net"
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

// FreePort's port is outside the ephemeral range, where no connection
// the host opens can take it, and can be bound.
func TestFreePort(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range:", err)
	}
	var lo int
	fmt.Sscan(string(b), &lo)
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if lo > 21000 && p >= lo {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
}
