package fault

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestKillDaemonMidCreateBurst kills spaced with SIGKILL while a burst of
// cold creates is in flight. After a restart every create acknowledged
// before the kill is running (and works) or reported lost with a reason;
// every other sandbox the daemon had begun is either running and listed
// (its reply was lost with the daemon) or gone from the host entirely;
// clients whose creates were cut off got an error, never a sandbox.
func TestKillDaemonMidCreateBurst(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "burst", CIDR: "10.246.16.0/20"})
	const n = 8
	type outcome struct {
		sb  *client.Sandbox
		err error
	}
	results := make(chan outcome, n)
	ctx := harness.Ctx(t, 2*time.Minute)
	for range n {
		go func() {
			sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
			results <- outcome{sb, err}
		}()
	}
	var acked []*client.Sandbox
	var cut []error
	received := 0
	for ; received < n && len(acked) < 2; received++ {
		o := <-results
		if o.err != nil {
			t.Fatalf("create before the kill failed: %v", o.err)
		}
		acked = append(acked, o.sb)
	}
	d.Kill9()
	for ; received < n; received++ {
		o := <-results
		if o.err == nil {
			acked = append(acked, o.sb) // answered just before the kill landed
			continue
		}
		cut = append(cut, o.err)
	}
	t.Logf("%d creates acknowledged before the kill, %d cut off", len(acked), len(cut))
	for _, err := range cut {
		var apiErr *client.APIError
		if errors.As(err, &apiErr) {
			t.Errorf("a create cut off by the kill answered %d %s: a dead daemon cannot answer", apiErr.Status, apiErr.Code)
		}
	}
	begun := records(t, d)
	states := map[string]int{}
	for _, rec := range begun {
		states[rec.State]++
	}
	t.Logf("the store held %d records at the kill: %v", len(begun), states)

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	ackedIDs := map[string]bool{}
	for _, sb := range acked {
		ackedIDs[sb.ID] = true
		got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), sb.ID)
		switch {
		case err != nil:
			t.Errorf("acknowledged sandbox %s after the restart: %v", sb.ID, err)
		case got.State == client.StateRunning:
			if out := run(t, d, sb.ID, "echo alive"); out != "alive\n" {
				t.Errorf("acknowledged sandbox %s runs but echo printed %q", sb.ID, out)
			}
		case got.State == "lost" && got.Reason != "":
			t.Logf("acknowledged sandbox %s reported lost: %s", sb.ID, got.Reason)
		default:
			t.Errorf("acknowledged sandbox %s is %s (reason %q), want running or lost with a reason", sb.ID, got.State, got.Reason)
		}
	}
	for _, rec := range begun {
		if ackedIDs[rec.ID] {
			continue
		}
		got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), rec.ID)
		if err == nil && got.State == client.StateRunning {
			t.Logf("sandbox %s (state %s at the kill) is running and listed: its reply died with the daemon", rec.ID, rec.State)
			continue
		}
		var left []string
		if !harness.WaitFor(10*time.Second, func() bool { left = d.Leftovers(rec.ID); return len(left) == 0 }) {
			t.Errorf("sandbox %s (state %s at the kill, %v now) left on the host: %v", rec.ID, rec.State, stateOf(got, err), left)
		}
	}
	checkNoOrphans(t, d)
	// The daemon works again: a create and a command.
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	if out := run(t, d, sb.ID, "echo ok"); out != "ok\n" {
		t.Errorf("new sandbox after the restart printed %q", out)
	}
}

func stateOf(sb *client.Sandbox, err error) string {
	if err != nil {
		return err.Error()
	}
	return string(sb.State) + " " + sb.Reason
}

// checkNoOrphans: everything runsc and the data dir hold belongs to a
// sandbox the API lists as running.
func checkNoOrphans(t *testing.T, d *harness.Daemon) {
	t.Helper()
	list, err := d.Client.ListAllSandboxes(harness.Ctx(t, 10*time.Second), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, sb := range list {
		running[sb.ID] = true
	}
	if d.Opts.Pool != "" {
		t.Fatal("checkNoOrphans needs a daemon without a pool (pooled sandboxes are not listed)")
	}
	states, _ := filepath.Glob(filepath.Join(d.DataDir, "runsc", "*.state"))
	dirs, _ := os.ReadDir(filepath.Join(d.DataDir, "sandboxes"))
	var orphans []string
	for _, s := range states {
		id, _, _ := strings.Cut(filepath.Base(s), "_")
		if !running[id] {
			orphans = append(orphans, "runsc state "+s)
		}
	}
	for _, e := range dirs {
		if !running[e.Name()] {
			orphans = append(orphans, "sandbox dir "+e.Name())
		}
	}
	if len(orphans) > 0 {
		t.Errorf("on the host but not running in the API: %v", orphans)
	}
}

// TestKillDaemonMidExec kills spaced with SIGKILL while a client follows a
// command's output. The client gets an error, not a clean end; after the
// restart it resumes from its last event id and gets the rest exactly once,
// and a file uploaded before the kill is intact.
func TestKillDaemonMidExec(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "exec", CIDR: "10.246.32.0/20"})
	ctx := harness.Ctx(t, 2*time.Minute)
	sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	acked := strings.Repeat("acknowledged data\n", 1000)
	if _, err := d.Client.Upload(ctx, sb.ID, "/home/user/acked.txt", strings.NewReader(acked)); err != nil {
		t.Fatal(err)
	}
	const lines = 40
	stream, err := d.Client.RunCommand(ctx, sb.ID, client.CommandRequest{
		Cmd: fmt.Sprintf("for i in $(seq 1 %d); do echo line-$i; sleep 0.05; done", lines),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "line-3\n") {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("before the kill: %v", err)
		}
		if ev.Type == client.EventStdout {
			out.Write(ev.Data)
		}
	}
	d.Kill9()
	for {
		ev, err := stream.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Errorf("the stream ended cleanly although the daemon was killed")
			}
			break
		}
		if ev.Type == client.EventStdout {
			out.Write(ev.Data)
		}
		if ev.Type == client.EventEnd {
			t.Fatalf("got the end event from a killed daemon")
		}
	}
	stream.Close()
	pid, last := stream.PID(), stream.LastEventID()

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	resumed, err := d.Client.CommandEvents(ctx, sb.ID, pid, last)
	if err != nil {
		t.Fatalf("resume pid %d after event %d: %v", pid, last, err)
	}
	defer resumed.Close()
	var end *client.ExitInfo
	for end == nil {
		ev, err := resumed.Next()
		if err != nil {
			t.Fatalf("resumed stream: %v", err)
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventGap:
			t.Errorf("output dropped across the restart: %s", ev.Data)
		case client.EventEnd:
			end = ev.Exit
		}
	}
	if end.Code() != 0 {
		t.Errorf("command exit %+v", *end)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if out.String() != want.String() {
		t.Errorf("output across the kill and resume:\n%s\nwant every line once", out.String())
	}
	rc, err := d.Client.Download(ctx, sb.ID, "/home/user/acked.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != acked {
		t.Errorf("file uploaded before the kill: %d bytes, want %d", len(got), len(acked))
	}
	if got, err := d.Client.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StateRunning {
		t.Errorf("after the restart the sandbox is %v", stateOf(got, err))
	}
}

// TestKillDaemonMidKillBurst kills spaced with SIGKILL while a burst of
// kills is in flight. After a restart every kill acknowledged before the
// daemon died has left nothing on the host, and every other sandbox is
// either still running (and works) or gone entirely: a kill cut off half
// way is finished by the restart, never left half-done.
func TestKillDaemonMidKillBurst(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "killburst", CIDR: "10.246.96.0/20"})
	const n = 6
	var sbs []*client.Sandbox
	for range n {
		sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	type outcome struct {
		id  string
		err error
	}
	results := make(chan outcome, n)
	ctx := harness.Ctx(t, time.Minute)
	for _, sb := range sbs {
		go func() { results <- outcome{sb.ID, d.Client.KillSandbox(ctx, sb.ID)} }()
	}
	acked := map[string]bool{}
	received := 0
	for ; received < n && len(acked) < 2; received++ {
		o := <-results
		if o.err != nil {
			t.Fatalf("kill before the daemon died: %v", o.err)
		}
		acked[o.id] = true
	}
	d.Kill9()
	for ; received < n; received++ {
		if o := <-results; o.err == nil {
			acked[o.id] = true
		}
	}
	t.Logf("%d kills acknowledged before the daemon died", len(acked))
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), sb.ID)
		t.Logf("sandbox %s (kill acknowledged %v) after the restart: %s", sb.ID, acked[sb.ID], stateOf(got, err))
		if err == nil && got.State == client.StateRunning {
			if acked[sb.ID] {
				t.Errorf("sandbox %s whose kill was acknowledged is running after the restart", sb.ID)
				continue
			}
			if out := run(t, d, sb.ID, "echo alive"); out != "alive\n" {
				t.Errorf("sandbox %s runs but echo printed %q", sb.ID, out)
			}
			continue
		}
		var left []string
		if !harness.WaitFor(10*time.Second, func() bool { left = d.Leftovers(sb.ID); return len(left) == 0 }) {
			t.Errorf("sandbox %s (kill acknowledged %v, now %s) left on the host: %v", sb.ID, acked[sb.ID], stateOf(got, err), left)
		}
	}
	checkNoOrphans(t, d)
}
