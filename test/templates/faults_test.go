package templates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestBuildFailures: a build that cannot be built is refused before it
// starts (400/413 saying what to fix), and one that fails says at which
// step, with the exit code and the end of that step's log; no failed or
// refused build moves a tag.
func TestBuildFailures(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "failures", CIDR: "10.247.16.0/22",
		Env: []string{"SPACE_TEMPLATE_MAX_UPLOAD=65536"}})
	ctx := harness.Ctx(t, 5*time.Minute)
	ctxDir := t.TempDir()
	writeTree(t, ctxDir, map[string]string{"app.txt": "app\n"})

	t.Run("refused before the build", func(t *testing.T) {
		up, err := d.Client.UploadContext(ctx, ctxDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			req    client.BuildRequest
			status int
			want   string
		}{
			{"unsupported instruction", client.BuildRequest{Name: "bad", Dockerfile: "FROM base\nRUN true\nCOPY --from=x /a /b\n", Context: up.Hash}, 400, "line 3: COPY --from"},
			{"multi-stage", client.BuildRequest{Name: "bad", Dockerfile: "FROM base AS one\nFROM base\n", Context: up.Hash}, 400, "line 2: multi-stage"},
			{"files never uploaded", client.BuildRequest{Name: "bad", Dockerfile: "FROM base\nCOPY app.txt /app.txt\n", Context: strings.Repeat("a", 64)}, 400, "upload them before the build"},
			{"bad name", client.BuildRequest{Name: "Bad Name", Dockerfile: "FROM base\n"}, 400, "not valid"},
			{"the base is the platform's", client.BuildRequest{Name: "base", Dockerfile: "FROM base\n"}, 400, "platform's template"},
			{"no source", client.BuildRequest{Name: "bad"}, 400, "dockerfile or a from"},
			{"bad step", client.BuildRequest{Name: "bad", From: &client.BuildFrom{Template: "base"}, Steps: []client.BuildStep{{Env: map[string]string{"1X": "y"}}}}, 400, "not a valid variable name"},
			{"too much memory", client.BuildRequest{Name: "bad", From: &client.BuildFrom{Template: "base"}, MemoryMB: 1 << 20}, 400, "memory_mb"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := d.Client.StartBuild(ctx, tc.req)
				if client.ErrorStatus(err) != tc.status || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %d saying %q", err, tc.status, tc.want)
				}
			})
		}
		// A context over the upload limit: 413, nothing stored.
		big := bytes.Repeat([]byte("x"), 100_000)
		sum := sha256.Sum256(big)
		err = d.Client.PutFiles(ctx, hex.EncodeToString(sum[:]), bytes.NewReader(big), int64(len(big)))
		if client.ErrorStatus(err) != 413 || !strings.Contains(err.Error(), "limit") {
			t.Errorf("oversized upload: %v, want 413", err)
		}
		if ok, _ := d.Client.HasFiles(ctx, hex.EncodeToString(sum[:])); ok {
			t.Error("an oversized upload was stored")
		}
	})

	t.Run("a failing step", func(t *testing.T) {
		b := build(t, d, ctxDir, client.BuildRequest{Name: "fails", Dockerfile: "FROM base\nRUN echo ok\nRUN echo about to fail; echo on stderr >&2; exit 3\nRUN echo never\n"})
		e := b.Error
		if b.State != client.BuildStateFailed || e == nil || e.Step != 2 || e.ExitCode == nil || *e.ExitCode != 3 {
			t.Fatalf("build %s, error %+v; want failed at step 2 with exit code 3", b.State, e)
		}
		if !strings.Contains(e.Message, "line 3") || !strings.Contains(strings.Join(e.LogTail, "\n"), "about to fail") {
			t.Errorf("the error does not name the line or show the step's log: %+v", e)
		}
		if strings.Contains(b.messages(-1), "never") {
			t.Error("a step after the failed one ran")
		}
		if _, err := d.Client.GetTemplate(ctx, "fails"); err != nil {
			t.Fatal(err)
		} else if tpl, _ := d.Client.GetTemplate(ctx, "fails"); len(tpl.Tags) != 0 {
			t.Errorf("a failed build got tags: %+v", tpl.Tags)
		}
		if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "fails"}); !client.IsNotFound(err) {
			t.Errorf("create from a template with no ready build: %v, want 404", err)
		}
	})

	t.Run("copy of a missing file", func(t *testing.T) {
		b := build(t, d, ctxDir, client.BuildRequest{Name: "nocopy", Dockerfile: "FROM base\nCOPY missing.txt /x\n"})
		if b.State != client.BuildStateFailed || b.Error == nil || b.Error.Step != 1 || !strings.Contains(b.Error.Message, `"missing.txt" is not in the uploaded files`) {
			t.Errorf("build %s, error %+v", b.State, b.Error)
		}
	})

	t.Run("a user that does not exist", func(t *testing.T) {
		b := build(t, d, "", client.BuildRequest{Name: "nouser", From: &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{User: "ghost"}, {Run: "true"}}})
		if b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "ghost") {
			t.Errorf("build %s, error %+v", b.State, b.Error)
		}
	})

	t.Run("out of disk", func(t *testing.T) {
		b := build(t, d, "", client.BuildRequest{Name: "full", DiskMB: 64, From: &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{Run: "dd if=/dev/zero of=/home/user/big bs=1M count=200"}}})
		if b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "ran out of disk") {
			t.Errorf("build %s, error %+v", b.State, b.Error)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		b, err := d.Client.StartBuild(ctx, client.BuildRequest{Name: "slow", From: &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{Run: "echo started; sleep 300"}}})
		if err != nil {
			t.Fatal(err)
		}
		waitLog(t, d, b.ID, "started")
		if _, err := d.Client.CancelBuild(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		end := follow(t, d, b.ID)
		if end.State != client.BuildStateCanceled {
			t.Errorf("after cancel: %s %+v", end.State, end.Error)
		}
	})
	checkNoBuildSandboxes(t, d)
}

// TestBuildTimeout: a build over its time is stopped with an error that
// says so, and leaves no sandbox behind.
func TestBuildTimeout(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "timeout", CIDR: "10.247.20.0/22", Env: []string{"SPACE_TEMPLATE_BUILD_TIMEOUT=5s"}})
	b := build(t, d, "", client.BuildRequest{Name: "slow", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "sleep 300"}}})
	if b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "longer than its timeout (5s)") {
		t.Errorf("build %s, error %+v", b.State, b.Error)
	}
	checkNoBuildSandboxes(t, d)
}

// TestRestartMidBuild: spaced killed (kill -9) while a step runs. After
// the restart the build is failed (not resumed half-way), its sandbox is
// gone, no tag moved, and building again runs the step anew (nothing the
// cut build made is used).
func TestRestartMidBuild(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "restart", CIDR: "10.247.24.0/22", StartTimeout: time.Minute})
	ctx := harness.Ctx(t, 5*time.Minute)
	req := client.BuildRequest{Name: "cut", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "echo first > /home/user/first"}, {Run: "echo second-started; sleep 20; echo second > /home/user/second"}}}
	b, err := d.Client.StartBuild(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, b.ID, "second-started")
	d.Kill9()
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	got, err := d.Client.GetBuild(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != client.BuildStateFailed || got.Error == nil || !strings.Contains(got.Error.Message, "interrupted by a restart") {
		t.Errorf("after the restart the build is %s %+v", got.State, got.Error)
	}
	checkNoBuildSandboxes(t, d)
	if tpl, err := d.Client.GetTemplate(ctx, "cut"); err != nil || len(tpl.Tags) != 0 {
		t.Errorf("template after the cut build: %+v, %v", tpl, err)
	}
	again := build(t, d, "", req)
	if again.State != client.BuildStateReady || again.Cached != 1 || !strings.Contains(again.messages(2), "second-started") {
		t.Errorf("rebuild: %s, %d cached, step 2 log:\n%s", again.State, again.Cached, again.messages(2))
	}
}

// waitLog waits until build id's log holds want.
func waitLog(t *testing.T, d *harness.Daemon, id, want string) {
	t.Helper()
	ok := harness.WaitFor(2*time.Minute, func() bool {
		s, err := d.Client.BuildLogs(harness.Ctx(t, 10*time.Second), id, 0)
		if err != nil {
			return false
		}
		defer s.Close()
		for {
			e, err := s.Next()
			if err != nil {
				return false
			}
			if strings.Contains(e.Message, want) {
				return true
			}
		}
	})
	if !ok {
		t.Fatalf("build %s never logged %q", id, want)
	}
}

// checkNoBuildSandboxes: every sandbox a build made is gone from the host.
func checkNoBuildSandboxes(t *testing.T, d *harness.Daemon) {
	t.Helper()
	if !harness.WaitFor(30*time.Second, func() bool {
		for _, name := range harness.DirEntries(d.DataDir + "/sandboxes") {
			if len(d.Leftovers(name)) > 0 {
				return false
			}
		}
		return len(harness.DirEntries(d.DataDir+"/sandboxes")) == 0
	}) {
		for _, name := range harness.DirEntries(d.DataDir + "/sandboxes") {
			t.Errorf("sandbox %s left on the host: %v", name, d.Leftovers(name))
		}
	}
}
