package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestIdempotentCommandStart: a start repeated with its Idempotency-Key
// runs nothing again: it answers the first command (same pid, its whole
// output, stdin written once) marked Idempotent-Replayed, foreground and
// background. The control, another key, does run the command again, so
// the count of runs can tell. The same key with another command and a
// malformed key are refused.
func TestIdempotentCommandStart(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	path := "/v1/sandboxes/" + sb.ID + "/commands"
	cmd := map[string]any{"cmd": "echo ran >> /tmp/runs; cat; echo done", "stdin": "once\n"}
	key := newKey()

	start := func(key string, body map[string]any) (pid int, out string, replayed bool) {
		t.Helper()
		resp, b := do(t, d, "POST", path, body, map[string]string{"Idempotency-Key": key, "Accept": "text/event-stream"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("start with key %s: %d %s", key, resp.StatusCode, b)
		}
		for _, ev := range parseAll(t, b) {
			switch ev.Event {
			case "start":
				var s struct{ PID int }
				json.Unmarshal([]byte(ev.Data), &s)
				pid = s.PID
			case "stdout":
				out += outputText(t, ev)
			}
		}
		return pid, out, resp.Header.Get("Idempotent-Replayed") == "true"
	}

	pid1, out1, rep1 := start(key, cmd)
	pid2, out2, rep2 := start(key, cmd)
	if pid1 == 0 || pid2 != pid1 || out1 != "once\ndone\n" || out2 != out1 || rep1 || !rep2 {
		t.Errorf("first start: pid %d %q replayed %v; again: pid %d %q replayed %v; want the same pid and output, the second replayed",
			pid1, out1, rep1, pid2, out2, rep2)
	}
	if got := sh(t, d, sb.ID, "cat /tmp/runs"); got != "ran\n" {
		t.Errorf("runs after two starts with one key: %q, want one", got)
	}
	// Control: another key starts the command again.
	if pid3, _, rep3 := start(newKey(), cmd); pid3 == pid1 || rep3 {
		t.Errorf("another key: pid %d replayed %v, want a new command", pid3, rep3)
	}
	if got := sh(t, d, sb.ID, "cat /tmp/runs"); got != "ran\nran\n" {
		t.Errorf("runs after a start with another key: %q, want two", got)
	}

	t.Run("background", func(t *testing.T) {
		key := newKey()
		body := map[string]any{"cmd": "echo bg >> /tmp/bg; sleep 60", "background": true, "tag": "idem-bg"}
		var pids []int
		for i := range 2 {
			resp, b := do(t, d, "POST", path, body, map[string]string{"Idempotency-Key": key})
			var c client.Command
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &c) != nil {
				t.Fatalf("background start %d: %d %s", i+1, resp.StatusCode, b)
			}
			if replayed := resp.Header.Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
				t.Errorf("background start %d: replayed %v", i+1, replayed)
			}
			pids = append(pids, c.PID)
		}
		if pids[0] != pids[1] {
			t.Errorf("background starts with one key: pids %v, want one", pids)
		}
		if got := sh(t, d, sb.ID, "cat /tmp/bg"); got != "bg\n" {
			t.Errorf("background runs: %q, want one", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		other := map[string]any{"cmd": "echo other >> /tmp/runs"}
		resp, b := do(t, d, "POST", path, other, map[string]string{"Idempotency-Key": key})
		if e := wantError(t, resp, b, http.StatusConflict, "already_exists"); !strings.Contains(e.Error.Message, "another command") {
			t.Errorf("same key, other command: %q, want it to say the key belongs to another command", e.Error.Message)
		}
		for _, bad := range []string{"has space", strings.Repeat("k", 256)} {
			resp, b := do(t, d, "POST", path, other, map[string]string{"Idempotency-Key": bad})
			if e := wantError(t, resp, b, http.StatusBadRequest, "invalid_argument"); !strings.Contains(e.Error.Message, "Idempotency-Key") {
				t.Errorf("key %.20q: %q, want the header named", bad, e.Error.Message)
			}
		}
		if got := sh(t, d, sb.ID, "cat /tmp/runs"); got != "ran\nran\n" {
			t.Errorf("runs after refused starts: %q, want still two", got)
		}
	})
}

// TestResumableStartLostAnswer: the answer to a start is lost (the
// connection is reset after spaced began answering, so the command
// started), and RunCommandResumable sends the start again under the same
// key: the stream it returns is the first command's, whole, and the
// command ran once. The control, without resume (no key, no retry),
// fails on the same cut.
func TestResumableStartLostAnswer(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})

	for _, tc := range []struct {
		name   string
		ro     client.ResumeOptions
		wantOK bool
	}{
		{"resumable", client.ResumeOptions{Retries: 5, Backoff: 50 * time.Millisecond}, true},
		{"control without resume", client.ResumeOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := "/tmp/runs-" + strings.ReplaceAll(tc.name, " ", "-")
			proxy, cuts := cutFirstStart(t, d)
			c := client.New(proxy, d.APIKey)
			ctx := harness.Ctx(t, 2*time.Minute)
			req := client.CommandRequest{Cmd: "echo ran >> " + runs + "; seq 1 5"}
			s, err := c.RunCommandResumable(ctx, sb.ID, req, tc.ro)
			var out strings.Builder
			if err == nil {
				defer s.Close()
				for {
					ev, nerr := s.Next()
					if errors.Is(nerr, io.EOF) {
						break
					}
					if nerr != nil {
						err = nerr
						break
					}
					if ev.Type == client.EventStdout {
						out.Write(ev.Data)
					}
				}
			}
			if cuts.Load() != 1 {
				t.Fatalf("the proxy cut %d starts, want 1", cuts.Load())
			}
			// The cut start did reach the agent: the command ran.
			got := ""
			for deadline := time.Now().Add(30 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				got = sh(t, d, sb.ID, "cat "+runs+" 2>/dev/null || true")
			}
			if tc.wantOK {
				if err != nil || out.String() != "1\n2\n3\n4\n5\n" || got != "ran\n" {
					t.Errorf("stream %q, err %v; runs %q: want the whole output of one run", out.String(), err, got)
				}
				return
			}
			if err == nil || got != "ran\n" {
				t.Errorf("control: err %v (stream %q), runs %q: want the cut to fail a start that did run", err, out.String(), got)
			}
		})
	}
}

// cutFirstStart is a proxy to d that forwards the first command start,
// waits for spaced's first answer bytes, and resets the client's
// connection instead of answering; everything else passes.
func cutFirstStart(t *testing.T, d *harness.Daemon) (string, *atomic.Int32) {
	target, _ := url.Parse("http://" + d.Addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	var cuts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/commands") || !cuts.CompareAndSwap(0, 1) {
			rp.ServeHTTP(w, r)
			return
		}
		out := r.Clone(context.WithoutCancel(r.Context()))
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = target.Scheme, target.Host, target.Host, ""
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err == nil {
			resp.Body.Read(make([]byte, 1)) // spaced began answering: the command started
			resp.Body.Close()
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a clean close
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &cuts
}

func newKey() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
