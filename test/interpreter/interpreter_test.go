// Package interpreter_test runs the unmodified E2B code-interpreter SDKs
// (Python from PyPI, JS from npm, both pinned) against space-interpreter
// started on this host, with real kernels from the wheelhouse (ipykernel,
// bash_kernel, Deno, JJava) and Debian's R with IRkernel.
// The SDKs run in E2B_DEBUG mode, where they create no sandbox and talk to
// http://localhost:49999 directly; so the server listens there, and a lock
// keeps two runs of this test on one machine from meeting. No python3 3.11,
// node or npm, or no wheelhouse, skips (strict mode: fails). The SDKs are
// installed by install-sdks.sh (a no-op when its markers match the pins).
package interpreter_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/interpreter"
	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// addr is where the SDKs' debug mode looks.
const addr = "127.0.0.1:49999"

const suiteTimeout = 4 * time.Minute

func TestSDKs(t *testing.T) {
	testenv.NeedCommand(t, "python3", "node", "npm")
	python, deno := interpretertest.Python(t), interpretertest.Deno(t)
	r := interpretertest.R(t)
	java, jjava := interpretertest.JJava(t)
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	harness.InstallSDKs(t, here)

	unlock := lockPort(t)
	defer unlock()
	var logs bytes.Buffer
	s, err := interpreter.New(interpreter.Config{
		Python: python, Deno: deno, R: r, Java: java, JJava: jjava, Cwd: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s (the SDKs' debug address): %v", addr, err)
	}
	srv := &http.Server{Handler: s.Handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	s.Start()
	if err := s.Err(); err != nil {
		t.Fatalf("default kernel: %v\n%s", err, logs.String())
	}

	env := append(harness.WithoutE2B(os.Environ()), "E2B_DEBUG=true")
	t.Run("python", func(t *testing.T) {
		harness.SDKSuite(t, logs.String, filepath.Join(here, "python"), env, suiteTimeout,
			filepath.Join(here, ".venv", "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", ".")
	})
	t.Run("js", func(t *testing.T) {
		tests, _ := filepath.Glob(filepath.Join(here, "js", "*.test.mjs"))
		if len(tests) == 0 {
			t.Fatal("no JS tests found")
		}
		harness.SDKSuite(t, logs.String, filepath.Join(here, "js"), env, suiteTimeout,
			"node", append([]string{"--test", "--test-concurrency=1", "--test-force-exit"}, tests...)...)
	})
}

// lockPort keeps other runs of this test on the machine off the SDKs'
// fixed port while this one uses it.
func lockPort(t *testing.T) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "space-interpreter-49999.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	return func() { f.Close() }
}

// runEnv runs a command on the host with more environment; a failure
// skips t (strict mode: fails it).
func runEnv(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		testenv.Skipf(t, "%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
}
