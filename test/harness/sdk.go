package harness

// What the SDK suites (test/e2b, test/desktop, test/interpreter) share:
// the host-side programs they run (an SDK's installer, its test runner)
// and the environment those see.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RunHost runs a program on the host in dir, with env added to this
// process's, and fails t with its output when it fails or outlasts
// timeout.
func RunHost(t testing.TB, dir string, env []string, timeout time.Duration, name string, args ...string) {
	t.Helper()
	if out, err := runHost(dir, env, timeout, name, args...); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func runHost(dir string, env []string, timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// InstallSDKs runs the install-sdks.sh of the suite in dir (a no-op when
// its markers match the pins), failing t when it fails.
func InstallSDKs(t testing.TB, dir string) {
	t.Helper()
	RunHost(t, dir, nil, 10*time.Minute, "./install-sdks.sh")
}

// SDKSuite runs one SDK's test suite (pytest, node --test) in dir with
// exactly env, logs its output and time, and fails t when it fails or
// outlasts timeout, logging what logs says of the server then (the tail
// of spaced's log).
func SDKSuite(t *testing.T, logs func() string, dir string, env []string, timeout time.Duration, name string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	begun := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s (%s):\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(begun).Round(time.Millisecond), out)
	if err != nil {
		t.Errorf("%s failed: %v", filepath.Base(name), err)
		t.Logf("server log (tail):\n%s", logs())
	}
}

// WithoutE2B is env without the caller's E2B_* settings (a real E2B key,
// debug mode, a domain), so that only the ones pointing at spaced apply.
func WithoutE2B(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "E2B_") {
			out = append(out, kv)
		}
	}
	return out
}

// Tail is the end of the daemon's log, for SDKSuite.
func (d *Daemon) Tail() string { return d.LogTail(60) }
