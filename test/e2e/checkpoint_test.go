package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// Pause, resume (here and on a second spaced sharing the object store),
// fork, disk snapshots, customer keys and the faults around them, against
// real runsc and a real S3 server (versitygw).

// s3Env is the daemon environment that points spaced at v, with the
// platform key in keyFile (nodes sharing a store share the key).
func s3Env(v *blobstoretest.Versity, keyFile string) []string {
	o := v.Options()
	return []string{
		"SPACE_OBJECT_STORE=s3://" + o.Bucket,
		"SPACE_S3_ENDPOINT=" + o.Endpoint,
		"SPACE_S3_ACCESS_KEY=" + o.AccessKey,
		"SPACE_S3_SECRET_KEY=" + o.SecretKey,
		"SPACE_PLATFORM_KEY_FILE=" + keyFile,
	}
}

// atRest lists the stored objects of v (its bucket is a directory) that
// hold marker.
func atRest(v *blobstoretest.Versity, marker []byte) []string {
	var hits []string
	filepath.WalkDir(v.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, marker) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

// checkpointNodes starts an S3 server and spaced daemons sharing it.
func checkpointNodes(t *testing.T, cidrs ...string) (*blobstoretest.Versity, []*harness.Daemon) {
	t.Helper()
	harness.Need(t)
	s3 := blobstoretest.StartVersity(t)
	keyFile := filepath.Join(t.TempDir(), "platform.json")
	var ds []*harness.Daemon
	for i, cidr := range cidrs {
		ds = append(ds, ownDaemon(t, harness.Options{Name: "ckpt" + strconv.Itoa(i), CIDR: cidr, NoPool: true, Env: s3Env(s3, keyFile)}))
	}
	return s3, ds
}

// counterServer holds its state in memory and behind an open listener:
// every connection to port 8000 gets the next count.
const counterServer = `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen()
marker = open("/home/user/marker").read()  # held in memory too
n = 0
while True:
    c, _ = s.accept()
    n += 1
    c.sendall(str(n).encode())
    c.close()
`

const askCounter = `python3 -c 'import socket; s=socket.create_connection(("127.0.0.1",8000),timeout=5); print(s.recv(64).decode())'`

func startCounter(t *testing.T, d *harness.Daemon, id, marker string) {
	t.Helper()
	sh(t, d, id, "printf %s "+marker+" > /home/user/marker")
	if _, err := d.Client.Upload(harness.Ctx(t, 30*time.Second), id, "/home/user/counter.py", strings.NewReader(counterServer)); err != nil {
		t.Fatal(err)
	}
	sh(t, d, id, "nohup python3 /home/user/counter.py >/dev/null 2>&1 & for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\",8000)).close()' 2>/dev/null && break; sleep 0.1; done")
}

func count(t *testing.T, d *harness.Daemon, id string) int {
	t.Helper()
	out := strings.TrimSpace(sh(t, d, id, askCounter))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter answered %q", out)
	}
	return n
}

func randMarker() string {
	b := make([]byte, 12)
	rand.Read(b)
	return fmt.Sprintf("SPACE-MARKER-%x", b)
}

func TestPauseResumeAcrossNodes(t *testing.T) {
	s3, ds := checkpointNodes(t, "10.241.160.0/20", "10.241.176.0/20")
	a, b := ds[0], ds[1]
	sb, err := a.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	marker := randMarker()
	startCounter(t, a, sb.ID, marker)
	next := count(t, a, sb.ID) + 1

	for cycle := 1; cycle <= 3; cycle++ {
		sh(t, a, sb.ID, fmt.Sprintf("echo cycle%d > /home/user/file%d", cycle, cycle))
		p, err := a.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID)
		if err != nil {
			t.Fatalf("cycle %d: pause: %v", cycle, err)
		}
		if p.State != "paused" || p.Checkpoint == nil || p.Checkpoint.Bytes == 0 {
			t.Fatalf("cycle %d: paused sandbox %+v, want state paused with a checkpoint", cycle, p)
		}
		if left := a.LeftoversAfter(sb.ID, 10*time.Second); len(left) > 0 {
			t.Errorf("cycle %d: a paused sandbox holds host resources: %v", cycle, left)
		}
		if hits := atRest(s3, []byte(marker)); len(hits) > 0 {
			t.Errorf("cycle %d: plaintext marker found at rest in %v", cycle, hits)
		}
		if _, err := a.Client.ResumeSandbox(harness.Ctx(t, 2*time.Minute), sb.ID, 600); err != nil {
			t.Fatalf("cycle %d: resume: %v", cycle, err)
		}
		if got := count(t, a, sb.ID); got != next {
			t.Fatalf("cycle %d: counter after resume = %d, want %d (memory state lost)", cycle, got, next)
		}
		next++
		for i := 1; i <= cycle; i++ {
			if got := strings.TrimSpace(sh(t, a, sb.ID, fmt.Sprintf("cat /home/user/file%d", i))); got != fmt.Sprintf("cycle%d", i) {
				t.Fatalf("cycle %d: file%d = %q after resume", cycle, i, got)
			}
		}
	}

	// Pause on a, resume on b: b has never heard of the sandbox. (b shares
	// this host, so it waits for a's teardown.)
	if _, err := a.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID); err != nil {
		t.Fatal(err)
	}
	if left := a.LeftoversAfter(sb.ID, 10*time.Second); len(left) > 0 {
		t.Fatalf("a paused sandbox holds host resources: %v", left)
	}
	got, err := b.Client.ResumeSandbox(harness.Ctx(t, 2*time.Minute), sb.ID, 600)
	if err != nil {
		t.Fatalf("resume on the second node: %v", err)
	}
	if got.ID != sb.ID || got.State != "running" {
		t.Fatalf("resumed on b: %+v", got)
	}
	if n := count(t, b, sb.ID); n != next {
		t.Fatalf("counter on the second node = %d, want %d", n, next)
	}
	if got := strings.TrimSpace(sh(t, b, sb.ID, "cat /home/user/file1 /home/user/file3 /home/user/marker")); got != "cycle1\ncycle3\n"+marker {
		t.Fatalf("files on the second node: %q", got)
	}
	if err := b.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID); err != nil {
		t.Fatal(err)
	}
	// a still has its paused record: killing it deletes it (the checkpoint
	// is already superseded by b's run).
	if err := a.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID); err != nil && !client.IsNotFound(err) {
		t.Fatal(err)
	}
}

func TestForkThree(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.192.0/20")
	d := ds[0]
	parent := d.NewSandbox(t, client.CreateSandboxRequest{Env: map[string]string{"FROM": "parent"}})
	startCounter(t, d, parent.ID, randMarker())
	base := count(t, d, parent.ID)
	forks, err := d.Client.ForkSandbox(harness.Ctx(t, 3*time.Minute), parent.ID, 3)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(forks) != 3 {
		t.Fatalf("got %d forks, want 3", len(forks))
	}
	seen := map[string]bool{parent.ID: true}
	for i, f := range forks {
		t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), f.ID) })
		if seen[f.ID] || f.AccessToken == "" || f.AccessToken == parent.AccessToken {
			t.Fatalf("fork %d: id %s token %q: want a new id and its own token", i, f.ID, f.AccessToken)
		}
		seen[f.ID] = true
		// Each fork goes on from the parent's state, independently.
		for step := 1; step <= i+1; step++ {
			if got := count(t, d, f.ID); got != base+step {
				t.Fatalf("fork %d step %d: counter %d, want %d", i, step, got, base+step)
			}
		}
		sh(t, d, f.ID, fmt.Sprintf("echo fork%d > /home/user/mine", i))
	}
	for i, f := range forks {
		if got := strings.TrimSpace(sh(t, d, f.ID, "cat /home/user/mine; echo $FROM")); got != fmt.Sprintf("fork%d\nparent", i) {
			t.Errorf("fork %d sees %q", i, got)
		}
	}
	if got := count(t, d, parent.ID); got != base+1 {
		t.Errorf("parent counter %d, want %d: forks must not touch it", got, base+1)
	}
	if out := sh(t, d, parent.ID, "ls /home/user/mine 2>&1 || true"); !strings.Contains(out, "No such file") {
		t.Errorf("a fork's file appeared in the parent: %q", out)
	}
}

func TestDiskSnapshotWhileWriting(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.208.0/20")
	d := ds[0]
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Env: map[string]string{"PARENT_SECRET": "s3cr3t"}})
	// A write loop: one line per 10 ms with a monotonic timestamp.
	writer := `import time
f = open("/home/user/log", "a", buffering=1)
while True:
    f.write("%.6f\n" % time.monotonic())
    time.sleep(0.01)
`
	if _, err := d.Client.Upload(harness.Ctx(t, 30*time.Second), sb.ID, "/home/user/writer.py", strings.NewReader(writer)); err != nil {
		t.Fatal(err)
	}
	sh(t, d, sb.ID, "nohup python3 /home/user/writer.py >/dev/null 2>&1 & echo $! > /home/user/writer.pid; sleep 1")
	var snaps []*client.Snapshot
	for range 3 {
		sn, err := d.Client.TakeSnapshot(harness.Ctx(t, time.Minute), sb.ID)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		snaps = append(snaps, sn)
		time.Sleep(300 * time.Millisecond)
	}
	sh(t, d, sb.ID, "sleep 0.5; kill $(cat /home/user/writer.pid)")
	log := strings.Fields(sh(t, d, sb.ID, "cat /home/user/log"))
	var maxGap float64
	for i := 1; i < len(log); i++ {
		a, _ := strconv.ParseFloat(log[i-1], 64)
		b, _ := strconv.ParseFloat(log[i], 64)
		maxGap = max(maxGap, b-a)
	}
	t.Logf("write loop: %d lines, longest gap %.0f ms across 3 snapshots", len(log), maxGap*1000)
	// docs/ARCHITECTURE.md documents the bound: the sandbox is stopped only
	// while runsc copies the layer (tens of ms); 1 s leaves room for a
	// loaded CI machine.
	if maxGap > 1.0 {
		t.Errorf("the write loop stopped for %.0f ms during a snapshot; the documented bound is 1000 ms", maxGap*1000)
	}

	list, err := d.Client.ListSnapshots(harness.Ctx(t, 30*time.Second), sb.ID)
	if err != nil || len(list) != 3 {
		t.Fatalf("list snapshots: %d, %v; want 3", len(list), err)
	}
	last := snaps[len(snaps)-1]
	restored := d.NewSandbox(t, client.CreateSandboxRequest{Snapshot: last.ID})
	got := strings.Fields(sh(t, d, restored.ID, "cat /home/user/log; cat /home/user/writer.py >/dev/null"))
	if len(got) == 0 || len(got) > len(log) {
		t.Fatalf("restored log has %d lines, the original %d", len(got), len(log))
	}
	// The disk only: not the source sandbox's env or token (the agent keeps
	// its state in memory, off the writable layer).
	if env := sh(t, d, restored.ID, "echo \"[$PARENT_SECRET]\"; grep -rl s3cr3t /run /etc /home 2>/dev/null || true"); strings.TrimSpace(env) != "[]" {
		t.Errorf("a sandbox made from a snapshot sees its source's env: %q", env)
	}
	// Point in time: a prefix of what the original wrote (the last line may
	// be cut where the write was in flight).
	for i := 0; i < len(got)-1; i++ {
		if got[i] != log[i] {
			t.Fatalf("restored log line %d = %q, original %q", i, got[i], log[i])
		}
	}
	if err := d.Client.DeleteSnapshot(harness.Ctx(t, 30*time.Second), snaps[0].ID); err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, d, "GET", "/v1/snapshots/"+snaps[0].ID, nil, nil)
	wantError(t, resp, body, 404, "not_found")
	resp, body = do(t, d, "POST", "/v1/sandboxes", map[string]any{"snapshot": "nosuchsnapshot"}, nil)
	wantError(t, resp, body, 404, "not_found")
}

func TestCustomerKey(t *testing.T) {
	s3, ds := checkpointNodes(t, "10.241.224.0/22")
	d := ds[0]
	ctx := harness.Ctx(t, 5*time.Minute)
	key1, key2, wrong := make([]byte, 32), make([]byte, 32), make([]byte, 32)
	rand.Read(key1)
	rand.Read(key2)
	rand.Read(wrong)

	// Bad input changes nothing.
	resp, body := do(t, d, "PUT", "/v1/keys/acme", map[string]string{"key": "c2hvcnQ="}, nil)
	wantError(t, resp, body, 400, "invalid_argument")
	resp, body = do(t, d, "POST", "/v1/sandboxes", map[string]any{"key_id": "acme"}, nil)
	wantError(t, resp, body, 409, "failed_precondition")

	if err := d.Client.PutKey(ctx, "acme", key1); err != nil {
		t.Fatal(err)
	}
	sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{KeyID: "acme", TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID) })
	marker := randMarker()
	startCounter(t, d, sb.ID, marker)
	if _, err := d.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if hits := atRest(s3, []byte(marker)); len(hits) > 0 {
		t.Fatalf("plaintext marker at rest: %v", hits)
	}

	// Without the key, or with the wrong one, the resume fails and says why.
	if err := d.Client.DeleteKey(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, nil)
	if e := wantError(t, resp, body, 409, "failed_precondition"); !strings.Contains(e.Error.Message, "acme") {
		t.Errorf("resume without the key: message %q does not name the key", e.Error.Message)
	}
	if err := d.Client.PutKey(ctx, "acme", wrong); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, nil)
	wantError(t, resp, body, 409, "failed_precondition")
	if got, _ := d.Client.GetSandbox(ctx, sb.ID); got == nil || got.State != "paused" {
		t.Fatalf("a failed resume changed the sandbox: %+v", got)
	}

	// Rotation: the old checkpoint stays restorable with only the new key.
	if err := d.Client.PutKey(ctx, "acme", key1); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Client.RotateKey(ctx, "acme", key2); err != nil || n < 1 {
		t.Fatalf("rotate: %d manifests, %v", n, err)
	}
	if err := d.Client.DeleteKey(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := d.Client.PutKey(ctx, "acme", key2); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume after rotation: %v", err)
	}
	if got := strings.TrimSpace(sh(t, d, sb.ID, "cat /home/user/marker")); got != marker {
		t.Fatalf("marker after resume: %q", got)
	}
}

func TestAutoPauseAndSnapshotSchedule(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.232.0/22")
	d := ds[0]
	ctx := harness.Ctx(t, 3*time.Minute)

	// At its timeout an auto-pause sandbox is paused, not killed.
	ap, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3, AutoPause: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), ap.ID) })
	startCounter(t, d, ap.ID, randMarker())
	n := count(t, d, ap.ID)
	if !harness.WaitFor(30*time.Second, func() bool {
		sb, err := d.Client.GetSandbox(ctx, ap.ID)
		return err == nil && sb.State == "paused"
	}) {
		sb, _ := d.Client.GetSandbox(ctx, ap.ID)
		t.Fatalf("auto-pause sandbox at its timeout: %+v, want paused", sb)
	}
	if _, err := d.Client.ResumeSandbox(ctx, ap.ID, 60); err != nil {
		t.Fatal(err)
	}
	if got := count(t, d, ap.ID); got != n+1 {
		t.Fatalf("counter after auto-pause and resume = %d, want %d", got, n+1)
	}

	// A schedule takes a snapshot every 5 s and keeps the newest 2.
	sc := d.NewSandbox(t, client.CreateSandboxRequest{SnapshotEverySeconds: 5, SnapshotKeep: 2})
	resp, body := do(t, d, "POST", "/v1/sandboxes", map[string]any{"snapshot_every_seconds": 1}, nil)
	wantError(t, resp, body, 400, "invalid_argument")
	var ids map[string]bool
	if !harness.WaitFor(40*time.Second, func() bool {
		list, err := d.Client.ListSnapshots(ctx, sc.ID)
		ids = map[string]bool{}
		for _, s := range list {
			ids[s.ID] = true
		}
		return err == nil && len(list) == 2
	}) {
		t.Fatalf("scheduled snapshots: %v, want 2", ids)
	}
	first := ids
	if !harness.WaitFor(30*time.Second, func() bool {
		list, err := d.Client.ListSnapshots(ctx, sc.ID)
		if err != nil || len(list) > 2 {
			return false
		}
		for _, s := range list {
			if !first[s.ID] {
				return true // a newer one replaced the oldest
			}
		}
		return false
	}) {
		t.Fatal("the schedule did not take a newer snapshot and trim to 2")
	}
	if list, _ := d.Client.ListSnapshots(ctx, sc.ID); len(list) > 2 {
		t.Fatalf("%d snapshots kept, want at most 2", len(list))
	}
}

func TestBenchCheckpointQuick(t *testing.T) {
	d := need(t) // its object store is the default local directory
	var res struct {
		Checkpoints []struct {
			StateMiB      int     `json:"state_mib"`
			PauseP50      float64 `json:"pause_p50_ms"`
			ResumeP50     float64 `json:"resume_p50_ms"`
			CheckpointMiB float64 `json:"checkpoint_mib"`
			// The raw runsc anchor, measured in the same run.
			RawCheckpointP50  float64 `json:"raw_checkpoint_p50_ms"`
			RawRestoreExecP50 float64 `json:"raw_restore_to_exec_p50_ms"`
			PauseRatio        float64 `json:"pause_ratio"`
			ResumeRatio       float64 `json:"resume_ratio"`
		} `json:"checkpoints"`
	}
	d.Bench(t, &res, "--checkpoint", "--quick", "--checkpoint-sizes", "0,16", "--runsc", testenv.Runsc(), "--templates-dir", testenv.TemplatesDir())
	if len(res.Checkpoints) != 2 {
		t.Fatalf("bench measured %d memory sizes, want 2: %+v", len(res.Checkpoints), res)
	}
	for _, c := range res.Checkpoints {
		if c.PauseP50 <= 0 || c.ResumeP50 <= 0 || c.CheckpointMiB <= float64(c.StateMiB) ||
			c.RawCheckpointP50 <= 0 || c.RawRestoreExecP50 <= 0 || c.PauseRatio <= 0 || c.ResumeRatio <= 0 {
			t.Errorf("figures for %d MiB: %+v", c.StateMiB, c)
		}
	}
}

// TestResumeAsSoonAsPaused: a sandbox is recorded paused before the pause
// has torn it down on the host, and GET /v1/events says so at once. A
// resume in that window (the console offers it then) waits for the pause
// to finish and resumes; it neither fails on the old instance's network
// namespace nor answers the paused record without resuming.
func TestResumeAsSoonAsPaused(t *testing.T) {
	d := need(t)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 300})
	sh(t, d, sb.ID, "echo before > /home/user/state")
	ctx := harness.Ctx(t, 2*time.Minute)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.Addr+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	paused := make(chan error, 1)
	go func() {
		_, err := d.Client.PauseSandbox(ctx, sb.ID)
		paused <- err
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for seen := false; !seen; {
		if !sc.Scan() {
			t.Fatalf("the event stream ended before the pause was recorded: %v (pause: %v)", sc.Err(), <-paused)
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev struct{ ID, State string }
			seen = json.Unmarshal([]byte(data), &ev) == nil && ev.ID == sb.ID && ev.State == "paused"
		}
	}
	got, err := d.Client.ResumeSandbox(ctx, sb.ID, 300)
	if err != nil {
		t.Fatalf("resume right after the pause was recorded: %v", err)
	}
	if got.State != "running" {
		t.Errorf("the resume answered a %s sandbox", got.State)
	}
	if err := <-paused; err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got := sh(t, d, sb.ID, "cat /home/user/state"); got != "before\n" {
		t.Errorf("after the resume the disk says %q", got)
	}
}
