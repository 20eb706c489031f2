package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// run runs a command through the client and fails the test unless it
// ends (with any exit code).
func run(t *testing.T, d *harness.Daemon, id string, req client.CommandRequest) harness.Result {
	t.Helper()
	r, err := d.Exec(harness.Ctx(t, 2*time.Minute), id, req)
	if err != nil {
		t.Fatalf("run %q%q in %s: %v", req.Cmd, req.Argv, id, err)
	}
	return r
}

// sh runs cmd as the default user and fails the test unless it exits 0.
func sh(t *testing.T, d *harness.Daemon, id, cmd string) string {
	t.Helper()
	return shAs(t, d, id, "", cmd)
}

func shAs(t *testing.T, d *harness.Daemon, id, user, cmd string) string {
	t.Helper()
	r := run(t, d, id, client.CommandRequest{Cmd: cmd, User: user})
	if r.Exit.Code() != 0 {
		t.Fatalf("%q in %s: exit %+v\nstdout: %s\nstderr: %s", cmd, id, *r.Exit, harness.Clip(r.Stdout), harness.Clip(r.Stderr))
	}
	return r.Stdout
}

// rawEvent is one server-sent event exactly as the daemon wrote it.
type rawEvent struct {
	ID    uint64
	HasID bool
	Event string
	Data  string
}

// sseScanner reads events and counts heartbeat comments.
type sseScanner struct {
	r          *bufio.Reader
	Heartbeats int
}

func newSSEScanner(r io.Reader) *sseScanner { return &sseScanner{r: bufio.NewReader(r)} }

func (s *sseScanner) Next() (rawEvent, error) {
	var ev rawEvent
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && len(data) == 0 && ev.Event == "" {
				return ev, io.EOF
			}
			return ev, fmt.Errorf("stream cut mid-event: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.Event == "" && len(data) == 0 && !ev.HasID {
				continue
			}
			ev.Data = strings.Join(data, "\n")
			return ev, nil
		case strings.HasPrefix(line, ":"):
			s.Heartbeats++
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			if err != nil {
				return ev, fmt.Errorf("bad id line %q", line)
			}
			ev.ID, ev.HasID = n, true
		case strings.HasPrefix(line, "event: "):
			ev.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			return ev, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// outputText decodes the {"text"} or {"base64"} payload of stdout/stderr.
func outputText(t *testing.T, ev rawEvent) string {
	t.Helper()
	var d struct {
		Text   *string `json:"text"`
		Base64 *string `json:"base64"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		t.Fatalf("%s event data %q: %v", ev.Event, ev.Data, err)
	}
	switch {
	case d.Text != nil:
		return *d.Text
	case d.Base64 != nil:
		b, err := base64.StdEncoding.DecodeString(*d.Base64)
		if err != nil {
			t.Fatalf("base64 in %q: %v", ev.Data, err)
		}
		return string(b)
	}
	t.Fatalf("%s event without text or base64: %q", ev.Event, ev.Data)
	return ""
}

// do sends a raw API request. body may be a string, []byte or nil; hdr
// holds extra headers (an "Authorization" of "" removes the default one).
func do(t *testing.T, d *harness.Daemon, method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(harness.Ctx(t, 2*time.Minute), method, "http://"+d.Addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wantError checks an error answer: status, JSON content type and code.
func wantError(t *testing.T, resp *http.Response, body []byte, status int, code string) apiError {
	t.Helper()
	var e apiError
	if resp.StatusCode != status {
		t.Errorf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, status, body)
		return e
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: content type %q, want JSON", resp.Request.Method, resp.Request.URL, ct)
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s %s: error body %q is not JSON: %v", resp.Request.Method, resp.Request.URL, body, err)
		return e
	}
	if e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("%s %s: error %+v, want code %q and a message", resp.Request.Method, resp.Request.URL, e.Error, code)
	}
	return e
}

// hostCmd runs a command on the host and fails the test if it fails.
func hostCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func readFileOr(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}

// openStream starts a raw streaming request and returns the response, whose
// body the caller reads and closes (cancel ctx to drop the connection).
func openStream(ctx context.Context, t *testing.T, d *harness.Daemon, method, path string, body any, hdr map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.Addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	req.Header.Set("Accept", "text/event-stream")
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s %s: status %d: %s", method, path, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("%s %s: content type %q", method, path, ct)
	}
	return resp
}
