package spawner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
)

// refusedClone is the line QEMU_STRACE writes for the helper's clone of a
// start (CLONE_VM|CLONE_VFORK|CLONE_PARENT and SIGCHLD, 0x11) when qemu
// refuses it.
var refusedClone = regexp.MustCompile(`(?m)^\d+ clone\(CLONE_VM\|CLONE_VFORK\|CLONE_PARENT\|0x11,.*\) = -1 errno=22 `)

// TestArm64HelperUnderQemu runs the arm64 build of space-spawn, compiled
// from the same source by the same script as the agent's, under qemu-user
// (qemu-aarch64-static runs a static aarch64 binary directly, without
// binfmt_misc), with this machine's own helper as the control.
//
// qemu-user cannot run the start itself: it refuses CLONE_PARENT on a
// clone that makes a process rather than a thread (EINVAL: linux-user's
// CLONE_INVALID_FORK_FLAGS, in Debian 12's qemu 7.2 as upstream), and it
// would run CLONE_VM|CLONE_VFORK as a plain fork, which shares no memory.
// So under qemu a start is checked as far as it goes, through the guest's
// system calls (QEMU_STRACE): the helper comes up (prctl, fcntl,
// sigprocmask), takes each request with its three descriptors (recvmsg,
// SCM_RIGHTS), parses it, reaches clone with the native helper's flags,
// answers qemu's EINVAL as the start's error, takes the next request, and
// exits 0 when the agent closes its socket. A malformed request (argc 0)
// is answered without a clone: the control of the strace check. Should a
// qemu run the start, its output and status are checked as the native
// helper's are.
func TestArm64HelperUnderQemu(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the arm64 helper is cross-built and emulated on amd64 hosts; this is %s", runtime.GOARCH)
	}
	testenv.NeedCommand(t, "qemu-aarch64-static")
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	helper := helperBinary(t, "arm64")
	exe := filepath.Join(dir, "space-spawn-arm64")
	if err := os.WriteFile(exe, helper, 0o755); err != nil {
		t.Fatal(err)
	}
	strace, err := os.Create(filepath.Join(dir, "strace"))
	if err != nil {
		t.Fatal(err)
	}
	defer strace.Close()
	// A start the helper cannot take goes through os/exec, and would
	// pass: the Spawner's warning of it fails the test instead.
	var warned bytes.Buffer
	emulated := New(helper, slog.New(slog.NewTextHandler(&warned, nil)))
	emulated.command = func() *exec.Cmd {
		// qemu reads the guest from a file: the sealed memfd is
		// close-on-exec, gone by the time qemu opens its guest.
		return &exec.Cmd{Path: qemu, Args: []string{"qemu-aarch64-static", exe}, Env: []string{"QEMU_STRACE=1"}, Stderr: strace}
	}
	defer emulated.Close()
	native := New(helperBinary(t, runtime.GOARCH), slog.New(slog.NewTextHandler(&warned, nil)))
	defer native.Close()

	cases := []struct {
		name string
		attr Attr
		want string
		code int
	}{
		{name: "args, env, dir and exit status", attr: func() Attr {
			a := sh(`echo "$0 $FOO $(pwd)"; exit 3`, "x")
			a.Dir = dir
			return a
		}(), want: "x bar " + dir + "\n", code: 3},
		{name: "own session", attr: func() Attr {
			a := sh(`read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ "$sid" = "$$" ] && echo session`)
			a.Setsid = true
			return a
		}(), want: "session\n"},
	}
	refused := 0
	for _, c := range cases {
		t.Run("native/"+c.name, func(t *testing.T) {
			out, st, err := run(t, native, c.attr)
			if warned.Len() > 0 {
				t.Fatalf("not through the helper: %s", warned.String())
			}
			if err != nil || out != c.want || st.ExitCode() != c.code {
				t.Fatalf("got %q (%v, %v), want %q (exit %d)", out, st, err, c.want, c.code)
			}
		})
		t.Run("qemu-arm64/"+c.name, func(t *testing.T) {
			out, st, err := run(t, emulated, c.attr)
			if warned.Len() > 0 {
				t.Fatalf("not through the helper: %s", warned.String())
			}
			switch {
			case err == nil:
				if out != c.want || st.ExitCode() != c.code {
					t.Fatalf("got %q (exit %d), want %q (exit %d)", out, st.ExitCode(), c.want, c.code)
				}
			case errors.Is(err, syscall.EINVAL) && err.Error() == "fork/exec /bin/sh: invalid argument":
				refused++ // matched with the strace below
			default:
				t.Fatalf("start: %v, want the output or qemu's EINVAL", err)
			}
		})
	}

	// The control: a request the helper must refuse before any clone.
	emulated.mu.Lock()
	sock, proc := emulated.sock, emulated.proc
	emulated.sock, emulated.proc = -1, nil
	emulated.mu.Unlock()
	if sock < 0 {
		t.Fatal("the emulated helper is not running")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fd := int(null.Fd())
	bad := make([]byte, 0, 24)
	for _, v := range []uint32{0, 0, 0, 0, 0 /* argc */, 0} {
		bad = binary.LittleEndian.AppendUint32(bad, v)
	}
	bad = append(bad, "/bin/sh\x00\x00"...)
	if err := unix.Sendmsg(sock, bad, unix.UnixRights(fd, fd, fd), nil, 0); err != nil {
		t.Fatal(err)
	}
	var answer [8]byte
	if n, err := unix.Read(sock, answer[:]); err != nil || n != 8 {
		t.Fatalf("answer to a malformed request: %d bytes, %v", n, err)
	}
	if pid, errno := binary.LittleEndian.Uint32(answer[0:]), syscall.Errno(binary.LittleEndian.Uint32(answer[4:])); pid != 0 || errno != syscall.EINVAL {
		t.Fatalf("answer to a malformed request: pid %d, %v; want 0, EINVAL", pid, errno)
	}

	// The agent goes: the helper ends with status 0, and its log is whole.
	unix.Close(sock)
	st, err := proc.Wait()
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("helper ended with %v, %v; want exit status 0", st, err)
	}
	log, err := os.ReadFile(strace.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(refusedClone.FindAll(log, -1)); got != refused {
		t.Fatalf("%d starts answered EINVAL, %d clones refused by qemu in its strace (the malformed request must make none):\n%s", refused, got, log)
	}
	if refused > 0 {
		t.Logf("qemu-user refused the helper's clone(CLONE_VM|CLONE_VFORK|CLONE_PARENT) of %d starts, as expected: everything before it ran as aarch64", refused)
	}
}
