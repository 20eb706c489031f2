package templates

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// TestStartOfAnotherEngine: a started template's checkpoint restores only
// into the runsc that took it. After spaced restarts on a runsc that says
// it is another build (runsc itself behind a script that answers
// --version with another version, as an upgrade would), the first create
// takes the template's start again, once, and its sandboxes restore that
// one with the start command running; until then no start is taken again
// (the positive control: the log line the test counts can be absent).
// Then on a third runsc whose checkpoint fails, the take fails once for
// two creates, which answer 503 saying why.
func TestStartOfAnotherEngine(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "engine", CIDR: "10.247.48.0/22"})
	mustBuild(t, d, "", client.BuildRequest{Name: "engine", From: &client.BuildFrom{Template: "base"},
		Start: &client.BuildStart{Cmd: "echo $$ > /tmp/start.pid; exec sleep 100000", Ready: client.BuildReady{File: "/tmp/start.pid"}}})
	running := func(id string) {
		t.Helper()
		sh(t, d, id, "", "kill -0 $(cat /tmp/start.pid)")
	}
	retakes := func() int {
		data, err := os.ReadFile(d.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(data), "taking a template's start again:")
	}
	running(d.NewSandbox(t, client.CreateSandboxRequest{Template: "engine"}).ID)
	if n := retakes(); n != 0 {
		t.Fatalf("the start was taken again %d times on the runsc that built it", n)
	}

	// restartOn restarts spaced on runsc behind a script that answers
	// --version with version and runs pre (shell) before the rest.
	restartOn := func(version, pre string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "runsc")
		script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'runsc version " + version + "'; exit 0; fi\n" +
			pre + "exec " + testenv.Runsc() + " \"$@\"\n"
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		d.Opts.Env = append(d.Opts.Env, "SPACE_RUNSC="+path)
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	restartOn("space-test-another-build", "")
	for range 2 {
		running(d.NewSandbox(t, client.CreateSandboxRequest{Template: "engine"}).ID)
	}
	if n := retakes(); n != 1 {
		t.Errorf("on another runsc the start was taken again %d times for two creates, want once", n)
	}
	starts := harness.DirEntries(filepath.Join(d.Opts.TemplatesDir, "_starts"))
	dirs := 0
	for _, e := range starts {
		if !strings.Contains(e, ".") {
			dirs++
		}
	}
	if dirs != 2 {
		t.Errorf("start checkpoints on the node: %v, want the build's and this runsc's", starts)
	}

	// A take that fails: yet another runsc, whose checkpoint fails. Both
	// creates answer 503 naming the template and the cause, from one
	// take (the failure is the answer for a minute, not a take per
	// create), and a template without a start still creates.
	restartOn("space-test-a-third-build",
		"for a in \"$@\"; do if [ \"$a\" = checkpoint ]; then echo 'checkpoint refused by the test' >&2; exit 1; fi; done\n")
	for i := range 2 {
		_, err := d.Client.CreateSandbox(harness.Ctx(t, 3*time.Minute), client.CreateSandboxRequest{Template: "engine"})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable ||
			!strings.Contains(apiErr.Message, "template engine") || !strings.Contains(apiErr.Message, "taking it again failed") {
			t.Errorf("create %d on a runsc whose take fails: %v, want 503 naming the template and the failed take", i+1, err)
		}
	}
	if n := retakes(); n != 2 {
		t.Errorf("after two creates whose take failed the start was taken again %d times in all, want 2 (once before, once now)", n)
	}
	d.NewSandbox(t, client.CreateSandboxRequest{}) // the base template has no start: unaffected
}
