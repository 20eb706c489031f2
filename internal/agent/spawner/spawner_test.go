package spawner

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/spacesandbox/space/internal/testenv"
)

// helperBinary compiles space-spawn for goarch from its source, as the
// build does (scripts/build-spawn-helper.sh, which exits 3 when goarch's
// toolchain is missing).
func helperBinary(t *testing.T, goarch string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "space-spawn")
	b, err := exec.Command("../../../scripts/build-spawn-helper.sh", goarch, out).CombinedOutput()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 3 {
		testenv.Skip(t, strings.TrimSpace(string(b)))
	}
	if err != nil {
		t.Fatalf("compile space-spawn for %s: %v\n%s", goarch, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// spawners are the two ways a start goes: the helper, and os/exec.
func spawners(t *testing.T) map[string]*Spawner {
	helped := New(helperBinary(t, runtime.GOARCH), slog.New(slog.DiscardHandler))
	t.Cleanup(helped.Close)
	return map[string]*Spawner{"helper": helped, "os/exec": New(nil, nil)}
}

// run starts a with a pipe as stdout and stderr and /dev/null as stdin,
// and returns what it wrote and how it ended.
func run(t *testing.T, s *Spawner, a Attr) (string, *os.ProcessState, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	a.Files = [3]*os.File{null, w, w}
	p, err := s.Start(a)
	w.Close()
	if err != nil {
		return "", nil, err
	}
	out, _ := io.ReadAll(r)
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(out), st, nil
}

func sh(script string, args ...string) Attr {
	return Attr{Path: "/bin/sh", Args: append([]string{"sh", "-c", script}, args...), Env: []string{"FOO=bar", "PATH=/usr/bin:/bin"}}
}

// TestSameAsOSExec runs the same starts through the helper and through
// os/exec and wants the same output, status or error from both.
func TestSameAsOSExec(t *testing.T) {
	t.Setenv("SPAWNER_TEST_VAR", "inherited")
	dir := t.TempDir()
	cases := []struct {
		name string
		attr Attr
		want string // output; "" with wantErr
		code int
		err  string // the error both give
		// asExec: the output is os/exec's (descriptors the test process
		// inherited are passed on by both)
		asExec bool
	}{
		{name: "args, env and dir", attr: func() Attr {
			a := sh(`echo "$0 $1 $FOO $(pwd)"`, "x", "y")
			a.Dir = dir
			return a
		}(), want: "x y bar " + dir + "\n"},
		{name: "only the environment given", attr: sh(`env | sort`), want: "FOO=bar\nPATH=/usr/bin:/bin\nPWD=" + mustGetwd(t) + "\n"},
		{name: "nil environment is this process's", attr: func() Attr {
			a := sh(`echo "$SPAWNER_TEST_VAR"`)
			a.Env = nil
			return a
		}(), want: "inherited\n"},
		{name: "exit status", attr: sh(`echo out; echo err >&2; exit 3`), want: "out\nerr\n", code: 3},
		{name: "no descriptor but what os/exec passes", attr: sh(`cd /proc/self/fd && echo *`), asExec: true},
		{name: "own process group", attr: func() Attr {
			a := sh(`read -r _ _ _ _ pgid _ < /proc/$$/stat; [ "$pgid" = "$$" ] && echo leader`)
			a.Setpgid = true
			return a
		}(), want: "leader\n"},
		// A child blocks nothing and ignores only what its parent was
		// started ignoring (a test run under nohup ignores SIGHUP). grep
		// reads its own status: a shell reading /proc/$$ races with its
		// own mask, which dash fills while it waits for a child.
		{name: "no signal blocked, none ignored but the inherited", attr: Attr{Path: "/usr/bin/grep", Args: []string{"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}}, want: "SigBlk:\t0000000000000000\n" + ownSigIgn(t)},
		{name: "missing program", attr: Attr{Path: "/nonexistent/prog", Args: []string{"prog"}}, err: "fork/exec /nonexistent/prog: no such file or directory"},
		{name: "not executable", attr: Attr{Path: "/etc/passwd", Args: []string{"passwd"}}, err: "fork/exec /etc/passwd: permission denied"},
		{name: "missing directory", attr: func() Attr {
			a := sh(`true`)
			a.Dir = "/nonexistent/dir"
			return a
		}(), err: "fork/exec /bin/sh: no such file or directory"},
		{name: "request too large for the helper", attr: sh(`echo ${#BIG}`, strings.Repeat("a", 10)), want: "70000\n"},
	}
	cases[len(cases)-1].attr.Env = append(cases[len(cases)-1].attr.Env, "BIG="+strings.Repeat("b", 70000))
	for mode, s := range spawners(t) {
		for _, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				if c.asExec {
					out, _, err := run(t, New(nil, nil), c.attr)
					if err != nil {
						t.Fatal(err)
					}
					c.want = out
				}
				out, st, err := run(t, s, c.attr)
				if c.err != "" {
					if err == nil || err.Error() != c.err {
						t.Fatalf("error %v, want %q", err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if out != c.want || st.ExitCode() != c.code {
					t.Fatalf("got %q (exit %d), want %q (exit %d)", out, st.ExitCode(), c.want, c.code)
				}
			})
		}
	}
}

// ownSigIgn is the SigIgn line of this process's status: the signals it
// was started ignoring, which every child inherits across exec.
func ownSigIgn(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SigIgn:") {
			return l + "\n"
		}
	}
	t.Fatal("no SigIgn in /proc/self/status")
	return ""
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestTerminal starts a shell in a new session with a pty as its
// controlling terminal.
func TestTerminal(t *testing.T) {
	for mode, s := range spawners(t) {
		t.Run(mode, func(t *testing.T) {
			master, tty, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer master.Close()
			a := sh(`tty; read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ "$sid" = "$$" ] && echo session`)
			a.Files = [3]*os.File{tty, tty, tty}
			a.Setsid, a.Setctty = true, true
			p, err := s.Start(a)
			tty.Close()
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_, _ = io.Copy(&out, master) // EIO once the shell is gone
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tty.Name()) || !strings.Contains(out.String(), "session") {
				t.Fatalf("output %q, want %s and session", out.String(), tty.Name())
			}
		})
	}
}

// TestCredentials starts a process as another user and group.
func TestCredentials(t *testing.T) {
	testenv.NeedRoot(t, "starting a process as another user")
	for mode, s := range spawners(t) {
		t.Run(mode, func(t *testing.T) {
			a := sh(`echo $(id -u) $(id -g) $(id -G)`)
			a.Cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534, 100}}
			out, _, err := run(t, s, a)
			if err != nil {
				t.Fatal(err)
			}
			if out != "65534 65534 65534 100\n" {
				t.Fatalf("got %q", out)
			}
		})
	}
}

// TestHelperKilled: a start after the helper died goes through a new one.
func TestHelperKilled(t *testing.T) {
	s := New(helperBinary(t, runtime.GOARCH), slog.New(slog.DiscardHandler))
	defer s.Close()
	for i := range 3 {
		if out, _, err := run(t, s, sh(`echo $0`, "ok")); err != nil || out != "ok\n" {
			t.Fatalf("start %d: %q, %v", i, out, err)
		}
		s.mu.Lock()
		helper := s.proc
		s.mu.Unlock()
		if helper == nil {
			t.Fatalf("start %d did not go through the helper", i)
		}
		if err := helper.Kill(); err != nil {
			t.Fatal(err)
		}
		_, _ = helper.Wait()
	}
}

// TestHelperStopped: a start the helper does not answer (stopped by root
// inside) fails after answerTimeout, not never, and the next start goes
// through a new helper.
func TestHelperStopped(t *testing.T) {
	defer func(d time.Duration) { answerTimeout = d }(answerTimeout)
	answerTimeout = 300 * time.Millisecond
	s := New(helperBinary(t, runtime.GOARCH), slog.New(slog.DiscardHandler))
	defer s.Close()
	if out, _, err := run(t, s, sh(`echo $0`, "before")); err != nil || out != "before\n" {
		t.Fatalf("the control start: %q, %v", out, err)
	}
	s.mu.Lock()
	stopped := s.proc
	s.mu.Unlock()
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err := run(t, s, sh(`echo $0`, "unanswered"))
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a start the stopped helper cannot answer: %v, want \"did not answer\"", err)
	}
	if took := time.Since(start); took < answerTimeout || took > answerTimeout+5*time.Second {
		t.Fatalf("the unanswered start failed after %v, want about %v", took, answerTimeout)
	}
	if out, _, err := run(t, s, sh(`echo $0`, "after")); err != nil || out != "after\n" {
		t.Fatalf("the start after: %q, %v", out, err)
	}
	s.mu.Lock()
	again := s.proc
	s.mu.Unlock()
	if again == nil || again.Pid == stopped.Pid {
		t.Fatalf("the start after did not go through a new helper (%v, was %d)", again, stopped.Pid)
	}
}

// TestHelperRunsFromMemfd: the helper's executable is nowhere in the
// file system.
func TestHelperRunsFromMemfd(t *testing.T) {
	s := New(helperBinary(t, runtime.GOARCH), slog.New(slog.DiscardHandler))
	defer s.Close()
	if _, _, err := run(t, s, sh(`true`)); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(s.proc.Pid) + "/exe")
	if err != nil || !strings.HasPrefix(exe, "/memfd:space-spawn") {
		t.Fatalf("exe %q, %v: want the memfd", exe, err)
	}
}

// TestEmbedded: the build embeds the helper for this architecture.
func TestEmbedded(t *testing.T) {
	if Embedded() == nil {
		testenv.Skipf(t, "no space-spawn-%s embedded: run scripts/build-spawn-helper.sh before the build", runtime.GOARCH)
	}
}

// TestErrorsAreOSExecs: startError in the process manager tells a missing
// program by errors.Is, for both ways.
func TestErrorsAreOSExecs(t *testing.T) {
	for mode, s := range spawners(t) {
		_, _, err := run(t, s, Attr{Path: "/nonexistent", Args: []string{"x"}})
		var pe *fs.PathError
		if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
			t.Fatalf("%s: %v is not a PathError of ErrNotExist", mode, err)
		}
	}
}
