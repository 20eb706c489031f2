package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestBasicFlow walks one sandbox through its life: commands, files, kill,
// and checks that nothing of it is left on the host.
func TestBasicFlow(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Metadata: map[string]string{"test": "basic"}})
	if sb.ID == "" || sb.State != client.StateRunning || sb.AccessToken == "" {
		t.Fatalf("create answered %+v; want an id, state running and an access token", sb)
	}

	t.Run("echo over raw SSE", func(t *testing.T) {
		resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/commands", map[string]string{"cmd": "echo hi"},
			map[string]string{"Accept": "text/event-stream"})
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		evs := parseAll(t, body)
		var types []string
		var stdout strings.Builder
		var last uint64
		for i, ev := range evs {
			types = append(types, ev.Event)
			if !ev.HasID || ev.ID <= last {
				t.Errorf("event %d (%s) has id %d (has id: %v) after id %d; ids must strictly increase", i, ev.Event, ev.ID, ev.HasID, last)
			}
			last = ev.ID
			if ev.Event == "stdout" {
				stdout.WriteString(outputText(t, ev))
			}
		}
		if len(evs) < 3 || evs[0].Event != "start" || evs[len(evs)-1].Event != "end" {
			t.Fatalf("events %v: want start ... end", types)
		}
		var start struct{ PID int }
		if err := json.Unmarshal([]byte(evs[0].Data), &start); err != nil || start.PID <= 0 {
			t.Errorf("start data %q: want a positive pid", evs[0].Data)
		}
		if stdout.String() != "hi\n" {
			t.Errorf("stdout %q, want %q (events %v)", stdout.String(), "hi\n", types)
		}
		var end client.ExitInfo
		if err := json.Unmarshal([]byte(evs[len(evs)-1].Data), &end); err != nil || end.ExitCode != 0 || !end.Exited {
			t.Errorf("end data %q: want exit_code 0, exited", evs[len(evs)-1].Data)
		}
	})

	t.Run("exit codes, stderr, user", func(t *testing.T) {
		r := run(t, d, sb.ID, client.CommandRequest{Cmd: "echo oops >&2; exit 7"})
		if r.Exit.ExitCode != 7 || r.Stderr != "oops\n" {
			t.Errorf("exit %+v stderr %q; want 7 and oops", *r.Exit, r.Stderr)
		}
		if got := sh(t, d, sb.ID, "id -u; echo $HOME; pwd"); got != "1000\n/home/user\n/home/user\n" {
			t.Errorf("id/home/cwd %q; want uid 1000 in /home/user", got)
		}
		if got := shAs(t, d, sb.ID, "root", "id -u"); got != "0\n" {
			t.Errorf("as root: id -u = %q", got)
		}
	})

	// A binary that does not exist is the caller's mistake: a 4xx (or an
	// end event with a non-zero code), never "unavailable, retry later".
	t.Run("missing binary is a client error", func(t *testing.T) {
		resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/commands", map[string]any{"argv": []string{"/no/such/binary"}},
			map[string]string{"Accept": "text/event-stream"})
		switch {
		case resp.StatusCode == http.StatusOK:
			evs := parseAll(t, body)
			if n := len(evs); n == 0 || evs[n-1].Event != "end" || strings.Contains(evs[n-1].Data, `"exit_code":0,`) {
				t.Errorf("missing binary streamed %s", body)
			}
		case resp.StatusCode >= 500:
			t.Errorf("missing binary: status %d %s; want 400/404 (the agent's exec error is mapped to CodeInternal, then to 503)", resp.StatusCode, body)
		}
	})

	t.Run("files", func(t *testing.T) { testFiles(t, d, sb.ID) })

	// Kill, then nothing may be left.
	ctx := harness.Ctx(t, time.Minute)
	resp, body := do(t, d, "DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("kill: status %d: %s", resp.StatusCode, body)
	}
	if left := d.Leftovers(sb.ID); len(left) > 0 {
		t.Errorf("after kill, left on the host: %v", left)
	}
	got, err := d.Client.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != client.StateKilled {
		t.Errorf("GET after kill: %+v %v; want state killed", got, err)
	}
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/commands", map[string]string{"cmd": "true"}, nil)
	if resp.StatusCode < 400 {
		t.Errorf("command in a killed sandbox: status %d: %s", resp.StatusCode, body)
	}
	resp, body = do(t, d, "DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("second kill: status %d (%s), want 404", resp.StatusCode, body)
	}
}

func testFiles(t *testing.T, d *harness.Daemon, id string) {
	ctx := harness.Ctx(t, 2*time.Minute)
	binary := []byte("a\x00b\xff\xfe\r\n\x1b[0m\x80end")
	big := make([]byte, 5<<20+123)
	rand.Read(big)
	for _, f := range []struct {
		path string
		data []byte
	}{
		{"/home/user/dir/sub/small.txt", []byte("hello\n")},
		{"dir/bin.dat", binary}, // relative: under the home dir
		{"/home/user/dir/big.bin", big},
		{"/home/user/empty", nil},
	} {
		e, err := d.Client.Upload(ctx, id, f.path, bytes.NewReader(f.data))
		if err != nil {
			t.Fatalf("upload %s: %v", f.path, err)
		}
		if e.Type != client.EntryFile || e.Size != int64(len(f.data)) {
			t.Errorf("upload %s answered %+v; want a file of %d bytes", f.path, e, len(f.data))
		}
		rc, err := d.Client.Download(ctx, id, f.path)
		if err != nil {
			t.Fatalf("download %s: %v", f.path, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, f.data) {
			t.Errorf("download %s: %d bytes (err %v), want the %d bytes uploaded", f.path, len(got), err, len(f.data))
		}
	}
	downloadHeaders(t, d, id, "/home/user/dir/sub/small.txt")
	// The sandbox sees the same bytes, owned by the user.
	if got := sh(t, d, id, "sha256sum /home/user/dir/big.bin | cut -c1-64; stat -c %U /home/user/dir/bin.dat"); !strings.HasSuffix(got, "user\n") {
		t.Errorf("inside the sandbox: %q; want the file owned by user", got)
	}

	entries, err := d.Client.ListFiles(ctx, id, "/home/user/dir", 2)
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, e := range entries {
		paths[e.Path] = string(e.Type)
	}
	for p, typ := range map[string]string{
		"/home/user/dir/sub": "dir", "/home/user/dir/sub/small.txt": "file",
		"/home/user/dir/bin.dat": "file", "/home/user/dir/big.bin": "file",
	} {
		if paths[p] != typ {
			t.Errorf("list depth 2: %s is %q, want %s (all: %v)", p, paths[p], typ, paths)
		}
	}
	if entries, err := d.Client.ListFiles(ctx, id, "/home/user/dir", 1); err != nil {
		t.Error(err)
	} else {
		for _, e := range entries {
			if e.Path == "/home/user/dir/sub/small.txt" {
				t.Errorf("list depth 1 went deeper: %v", entries)
			}
		}
	}

	st, err := d.Client.Stat(ctx, id, "/home/user/dir/big.bin")
	if err != nil || st.Size != int64(len(big)) || st.Type != client.EntryFile || st.Name != "big.bin" || st.Owner != "user" {
		t.Errorf("stat big.bin: %+v %v", st, err)
	}
	if _, err := d.Client.MakeDir(ctx, id, "/home/user/made/a/b"); err != nil {
		t.Errorf("mkdir: %v", err)
	}
	if st, err := d.Client.Stat(ctx, id, "/home/user/made/a/b"); err != nil || st.Type != client.EntryDir {
		t.Errorf("stat made dir: %+v %v", st, err)
	}
	if _, err := d.Client.Move(ctx, id, "/home/user/dir/sub/small.txt", "/home/user/made/a/b/moved.txt"); err != nil {
		t.Errorf("move: %v", err)
	}
	if _, err := d.Client.Stat(ctx, id, "/home/user/dir/sub/small.txt"); !client.IsNotFound(err) {
		t.Errorf("stat of the moved source: %v, want not found", err)
	}
	if got := sh(t, d, id, "cat /home/user/made/a/b/moved.txt"); got != "hello\n" {
		t.Errorf("moved file holds %q", got)
	}
	if err := d.Client.Remove(ctx, id, "/home/user/dir"); err != nil {
		t.Errorf("remove tree: %v", err)
	}
	if err := d.Client.Remove(ctx, id, "/home/user/dir"); err != nil {
		t.Errorf("remove of a missing path must not be an error: %v", err)
	}
	if got := sh(t, d, id, "test -e /home/user/dir && echo present || echo gone"); got != "gone\n" {
		t.Errorf("after remove: %q", got)
	}
}

// downloadHeaders checks what a download says of the file besides its
// bytes, whole and a byte range of it; path holds "hello\n".
func downloadHeaders(t *testing.T, d *harness.Daemon, id, path string) {
	t.Helper()
	for _, tc := range []struct {
		rng, body, length, contentRange string
		status                          int
	}{
		{"", "hello\n", "6", "", http.StatusOK},
		{"bytes=2-4", "llo", "3", "bytes 2-4/6", http.StatusPartialContent},
	} {
		req, _ := http.NewRequestWithContext(harness.Ctx(t, 30*time.Second), "GET",
			"http://"+d.Addr+"/v1/sandboxes/"+id+"/files?path="+path, nil)
		req.Header.Set("X-API-Key", d.APIKey)
		if tc.rng != "" {
			req.Header.Set("Range", tc.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != tc.status || string(body) != tc.body || h.Get("Content-Length") != tc.length ||
			h.Get("Content-Range") != tc.contentRange || h.Get("Accept-Ranges") != "bytes" ||
			h.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("download %s with Range %q: %d %q %v; want %d %q, Content-Length %s, Content-Range %q, Accept-Ranges bytes",
				path, tc.rng, resp.StatusCode, body, h, tc.status, tc.body, tc.length, tc.contentRange)
		}
		if lm, err := http.ParseTime(h.Get("Last-Modified")); err != nil || time.Since(lm) > time.Hour {
			t.Errorf("download %s: Last-Modified %q, want the file's recent modification time", path, h.Get("Last-Modified"))
		}
	}
}

func parseAll(t *testing.T, body []byte) []rawEvent {
	t.Helper()
	sc := newSSEScanner(bytes.NewReader(body))
	var evs []rawEvent
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("parse SSE: %v\n%s", err, body)
		}
		evs = append(evs, ev)
	}
}

// TestReconnect drops a command's stream half way and resumes it with
// Last-Event-ID: every line arrives exactly once, then the end.
func TestReconnect(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	var want strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}

	ctx1, drop := context.WithCancel(context.Background())
	defer drop()
	resp := openStream(ctx1, t, d, "POST", "/v1/sandboxes/"+sb.ID+"/commands",
		map[string]string{"cmd": "for i in $(seq 1 200); do echo $i; sleep 0.02; done"}, nil)
	sc := newSSEScanner(resp.Body)
	var out strings.Builder
	var lastID uint64
	pid := 0
	for strings.Count(out.String(), "\n") < 100 {
		ev, err := sc.Next()
		if err != nil {
			t.Fatalf("first stream after %q: %v", out.String(), err)
		}
		if ev.ID <= lastID {
			t.Fatalf("id %d after %d", ev.ID, lastID)
		}
		lastID = ev.ID
		switch ev.Event {
		case "start":
			var s struct{ PID int }
			json.Unmarshal([]byte(ev.Data), &s)
			pid = s.PID
		case "stdout":
			out.WriteString(outputText(t, ev))
		case "end":
			t.Fatalf("command ended before the drop: %s", ev.Data)
		}
	}
	drop()
	resp.Body.Close()
	if pid == 0 {
		t.Fatal("no start event")
	}
	t.Logf("dropped after event %d with %d lines", lastID, strings.Count(out.String(), "\n"))

	resp = openStream(harness.Ctx(t, time.Minute), t, d, "GET",
		"/v1/sandboxes/"+sb.ID+"/commands/"+strconv.Itoa(pid)+"/events", nil,
		map[string]string{"Last-Event-ID": strconv.FormatUint(lastID, 10)})
	defer resp.Body.Close()
	sc = newSSEScanner(resp.Body)
	var end *client.ExitInfo
	for end == nil {
		ev, err := sc.Next()
		if err != nil {
			t.Fatalf("resumed stream after %d bytes: %v", out.Len(), err)
		}
		if ev.ID <= lastID {
			t.Fatalf("resumed stream replayed id %d (%s %s), not after %d", ev.ID, ev.Event, ev.Data, lastID)
		}
		lastID = ev.ID
		switch ev.Event {
		case "stdout":
			out.WriteString(outputText(t, ev))
		case "gap":
			t.Fatalf("gap event in a small stream: %s", ev.Data)
		case "end":
			end = &client.ExitInfo{}
			if err := json.Unmarshal([]byte(ev.Data), end); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out.String() != want.String() {
		t.Errorf("joined stdout is not 1..200 exactly once:\n%q", out.String())
	}
	if end.ExitCode != 0 || !end.Exited {
		t.Errorf("end %+v, want exit 0", *end)
	}
	// The same with the ?after= form and from the start: a full replay.
	resp2, body := do(t, d, "GET", "/v1/sandboxes/"+sb.ID+"/commands/"+strconv.Itoa(pid)+"/events?after=0", nil, nil)
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("replay: %d %s", resp2.StatusCode, body)
	}
	var all strings.Builder
	for _, ev := range parseAll(t, body) {
		if ev.Event == "stdout" {
			all.WriteString(outputText(t, ev))
		}
	}
	if all.String() != want.String() {
		t.Errorf("full replay of an ended command differs:\n%q", all.String())
	}
}

// TestCommandSignalDefaults: commands start with every signal at its default
// disposition (the agent, as init, drops SIGHUP, SIGQUIT and SIGABRT sent
// to itself; its children must not inherit that), and SIGHUP ends a shell.
func TestCommandSignalDefaults(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	for _, user := range []string{"", "root"} {
		out := shAs(t, d, sb.ID, user, `python3 -c 'import signal; print([s for s in range(1, 32) if s not in (9, 19) and signal.getsignal(s) == signal.SIG_IGN and s not in (13, 25)])'`)
		if strings.TrimSpace(out) != "[]" {
			t.Errorf("as %q, signals ignored in a command: %s", user, out)
		}
	}
	if out := sh(t, d, sb.ID, `sh -c 'kill -HUP $$; echo survived' ; echo "status $?"`); strings.Contains(out, "survived") || !strings.Contains(out, "status 129") {
		t.Fatalf("a shell sent SIGHUP did not end with it: %q", out)
	}
	if out := shAs(t, d, sb.ID, "root", `kill -HUP 1; kill -QUIT 1; kill -ABRT 1; sleep 0.2; echo alive`); strings.TrimSpace(out) != "alive" {
		t.Fatalf("the agent did not survive SIGHUP/SIGQUIT/SIGABRT: %q", out)
	}
}

// TestOrphansReaped: the agent, the sandbox's init, reaps the orphans it
// inherits, whether they end long after the command that left them or at
// the same moment as it (an orphan behind a zombie of the agent's own is
// reaped once that one is waited for). The positive control: a process that does not wait for its child shows a
// zombie to the same check.
func TestOrphansReaped(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	const zombies = `ps -eo stat= | grep -c ^Z || true`
	control := sh(t, d, sb.ID, `python3 -c 'import os, subprocess, time
if os.fork() == 0:
    os._exit(0)
time.sleep(0.5)
print(subprocess.run(["sh", "-c", "`+zombies+`"], capture_output=True, text=True).stdout.strip())'`)
	if strings.TrimSpace(control) == "0" {
		t.Fatalf("the check saw no zombie under a parent that does not wait: %q", control)
	}
	for range 10 {
		sh(t, d, sb.ID, `sleep 0.2 & exit 0`)                // ends after the command
		sh(t, d, sb.ID, `(sleep 0.2 &) ; sleep 0.2; exit 0`) // ends with the command
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := strings.TrimSpace(sh(t, d, sb.ID, zombies))
		if out == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s zombies left in the sandbox:\n%s", out, sh(t, d, sb.ID, "ps -eo pid,ppid,stat,args"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
