// Package testenv decides, in one place, what a test does when the machine
// lacks something it needs (root, runsc, the base template, versitygw, a
// tool on PATH): on a developer's machine it skips with the reason, but
// under strict mode (SPACE_TEST_STRICT=1, set by scripts/test.sh and so in
// CI) it fails, so that a run that silently tested nothing cannot pass.
//
// Skips for other reasons (-short, a test that runs only when asked, a
// capability a runtime does not have) do not come here: they are choices,
// not missing dependencies.
package testenv

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// StrictEnv is the variable that turns strict mode on when it is "1".
const StrictEnv = "SPACE_TEST_STRICT"

// stderr is where Unavailable explains itself (a test swaps it).
var stderr io.Writer = os.Stderr

// Strict reports whether a missing dependency fails instead of skipping.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// Skip skips tb because the machine lacks something; under strict mode it
// fails tb instead.
func Skip(tb testing.TB, reason string) {
	tb.Helper()
	if Strict() {
		tb.Fatalf("%s (%s=1: a missing dependency is a failure)", reason, StrictEnv)
		return
	}
	tb.Skip(reason)
}

// Skipf is Skip with a formatted reason.
func Skipf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	Skip(tb, fmt.Sprintf(format, args...))
}

// Unavailable is for the TestMain of a package that cannot run at all
// here; reason says why ("" means it can, and nothing is printed). It
// prints the reason and reports whether TestMain must stop and exit
// non-zero: under strict mode it must; otherwise TestMain goes on to
// m.Run and each test that needs the dependency skips with the reason.
func Unavailable(pkg, reason string) (stop bool) {
	if reason == "" {
		return false
	}
	if Strict() {
		fmt.Fprintf(stderr, "%s: FAIL: cannot run: %s (%s=1: a missing dependency is a failure; unset it to skip)\n", pkg, reason, StrictEnv)
		return true
	}
	fmt.Fprintf(stderr, "%s: skipping: %s\n", pkg, reason)
	return false
}

// First returns the first non-empty reason: the checks below, in the
// order a reader would fix them.
func First(reasons ...string) string {
	for _, r := range reasons {
		if r != "" {
			return r
		}
	}
	return ""
}

// Runsc is the runsc binary the tests use (SPACE_RUNSC, as spaced reads it).
func Runsc() string { return envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc") }

// TemplatesDir is the templates directory (SPACE_TEMPLATES_DIR, as spaced
// and scripts/build-template.sh read it).
func TemplatesDir() string { return envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates") }

// BaseRootfs is the base template's current root filesystem.
func BaseRootfs() string { return filepath.Join(TemplatesDir(), "base", "current") }

// CheckRoot says why a test that needs root cannot run; what says what it
// does as root.
func CheckRoot(what string) string {
	if os.Geteuid() != 0 {
		return "needs root (" + what + ")"
	}
	return ""
}

// CheckRunsc says why runsc is not usable.
func CheckRunsc() string {
	if p := Runsc(); !exists(p) {
		return fmt.Sprintf("runsc not found at %s (run scripts/install-deps.sh or set SPACE_RUNSC)", p)
	}
	return ""
}

// CheckTemplate says why the base template is not usable: it must hold
// the agent, which scripts/build-template.sh installs last.
func CheckTemplate() string {
	if !exists(filepath.Join(BaseRootfs(), "usr/local/bin/space-agent")) {
		return fmt.Sprintf("base template not found at %s (run scripts/build-template.sh or set SPACE_TEMPLATES_DIR)", BaseRootfs())
	}
	return ""
}

// CheckCommand says why a tool is not on PATH.
func CheckCommand(name string) string {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Sprintf("%s not found on PATH (scripts/install-deps.sh installs it)", name)
	}
	return ""
}

// Versitygw is the versitygw binary (SPACE_VERSITYGW, else where
// scripts/install-versitygw.sh puts it; failing that, one on PATH), or ""
// when there is none.
func Versitygw() string {
	if p := envOr("SPACE_VERSITYGW", "/usr/local/lib/space/bin/versitygw"); exists(p) {
		return p
	}
	p, _ := exec.LookPath("versitygw")
	return p
}

// NeedRoot skips (or, strict, fails) tb unless it runs as root.
func NeedRoot(tb testing.TB, what string) {
	tb.Helper()
	if r := CheckRoot(what); r != "" {
		Skip(tb, r)
	}
}

// NeedRunsc returns the runsc binary, or skips (strict: fails) tb.
func NeedRunsc(tb testing.TB) string {
	tb.Helper()
	if r := CheckRunsc(); r != "" {
		Skip(tb, r)
	}
	return Runsc()
}

// NeedTemplate returns the base template's root filesystem, or skips
// (strict: fails) tb.
func NeedTemplate(tb testing.TB) string {
	tb.Helper()
	if r := CheckTemplate(); r != "" {
		Skip(tb, r)
	}
	return BaseRootfs()
}

// NeedCommand skips (strict: fails) tb unless every tool is on PATH.
func NeedCommand(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if r := CheckCommand(n); r != "" {
			Skip(tb, r)
		}
	}
}

// NeedVersitygw returns the versitygw binary, or skips (strict: fails) tb.
func NeedVersitygw(tb testing.TB) string {
	tb.Helper()
	p := Versitygw()
	if p == "" {
		Skip(tb, "versitygw not installed (run scripts/install-versitygw.sh or set SPACE_VERSITYGW)")
	}
	return p
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// FreePort is a TCP port free on loopback now, for a server a test starts
// as another process (spaced, PostgreSQL, versitygw), which binds it a
// while later. It is picked below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), not by binding port 0: a port of that
// range, free when picked, may become the local port of any connection
// the host opens before the server binds it (on a busy CI machine the
// window is long), or while a test restarts the server on it.
func FreePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 {
			low = lo
		}
	}
	const floor = 20000 // under it: ports that well-known servers use
	if low-floor >= 1000 {
		for range 200 {
			p := floor + rand.IntN(low-floor)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
