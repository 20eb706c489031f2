package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/test/harness"
)

// TestCLI drives the space CLI against the real daemon.
func TestCLI(t *testing.T) {
	d := need(t)
	t.Parallel()
	space := func(stdin string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(harness.Ctx(t, time.Minute), harness.Bin(t, "space"), args...)
		cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if err != nil && cmd.ProcessState == nil {
			t.Fatalf("space %v: %v", args, err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	out, errOut, code := space("", "create", "--timeout", "120", "--meta", "by=cli")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("space create: %d %q %q", code, out, errOut)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), id) })

	out, errOut, code = space("", "exec", id, "--", "sh -c 'echo out; echo err >&2; exit 3'")
	if out != "out\n" || errOut != "err\n" || code != 3 {
		t.Errorf("space exec: stdout %q stderr %q code %d; want out, err, 3", out, errOut, code)
	}
	out, _, code = space("", "exec", id, "--", "echo", "two words")
	if out != "two words\n" || code != 0 {
		t.Errorf("space exec argv: %q %d", out, code)
	}
	out, _, code = space("piped\n", "exec", id, "--", "cat")
	if out != "piped\n" || code != 0 {
		t.Errorf("space exec with stdin: %q %d", out, code)
	}

	local := filepath.Join(t.TempDir(), "in.bin")
	data := append([]byte("cli\x00bytes\xff"), bytes.Repeat([]byte{7}, 100000)...)
	os.WriteFile(local, data, 0o644)
	if _, e, c := space("", "cp", local, id+":/home/user/cli/"); c != 0 {
		t.Fatalf("space cp in: %d %s", c, e)
	}
	back := filepath.Join(t.TempDir(), "back.bin")
	if _, e, c := space("", "cp", id+":/home/user/cli/in.bin", back); c != 0 {
		t.Fatalf("space cp out: %d %s", c, e)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Errorf("space cp round trip: %d bytes, want %d", len(got), len(data))
	}
	if out, _, _ := space("", "cp", id+":/home/user/cli/in.bin", "-"); out != string(data) {
		t.Errorf("space cp to stdout: %d bytes", len(out))
	}

	out, _, code = space("", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("space ls: %d\n%s", code, out)
	}
	if _, e, c := space("", "kill", id); c != 0 {
		t.Errorf("space kill: %d %s", c, e)
	}
	out, _, _ = space("", "ls", "--state", "killed")
	if !strings.Contains(out, id) {
		t.Errorf("space ls --state killed does not list %s:\n%s", id, out)
	}
	if _, _, c := space("", "exec", id, "--", "true"); c == 0 {
		t.Error("space exec in a killed sandbox exited 0")
	}
	if _, e, c := space("", "kill", "nosuchsandbox1"); c == 0 || !strings.Contains(e, "not found") {
		t.Errorf("space kill of an unknown id: %d %q", c, e)
	}
}
