package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
)

func TestAuth(t *testing.T) {
	ta := newTestAgent(t, agentOpts{token: "secret"})
	noTokenAgent := newTestAgent(t, agentOpts{noToken: true})
	tests := []struct {
		name   string
		agent  *testAgent
		method string
		path   string
		token  string
		status int
	}{
		{"health open", ta, "GET", "/health", "", 204},
		{"health open without token", noTokenAgent, "GET", "/health", "", 204},
		{"metrics needs token", ta, "GET", "/metrics", "", 401},
		{"metrics wrong token", ta, "GET", "/metrics", "nope", 401},
		{"metrics", ta, "GET", "/metrics", "secret", 200},
		{"envs", ta, "GET", "/envs", "secret", 200},
		{"files without token", ta, "GET", "/files?path=/etc/hostname", "", 401},
		{"no token refuses all", noTokenAgent, "GET", "/envs", "", 401},
		{"no token refuses even a guess", noTokenAgent, "GET", "/envs", "x", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, tt.method, tt.agent.url+tt.path, nil)
			if tt.token != "" {
				req.Header.Set(TokenHeader, tt.token)
			}
			resp, body := doHTTP(t, req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 401 {
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != 401 || e.Message == "" {
					t.Errorf("error body %q", body)
				}
			}
		})
	}

	t.Run("rpc", func(t *testing.T) {
		for _, tok := range []string{"", "wrong"} {
			c := processconnect.NewProcessClient(http.DefaultClient, ta.url, ta.clientOpts(func() string { return tok })...)
			_, err := c.List(ctxTimeout(t, 5*time.Second), connect.NewRequest(&process.ListRequest{}))
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("token %q: %v", tok, err)
			}
			stream, err := c.Start(ctxTimeout(t, 5*time.Second), connect.NewRequest(&process.StartRequest{Process: shell("true")}))
			if err == nil {
				for stream.Receive() {
					t.Errorf("token %q: got an event", tok)
				}
				err = stream.Err()
			}
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("stream with token %q: %v", tok, err)
			}
		}
	})
}

func TestStreamContentType(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	body := `{"process":{"cmd":"echo","args":["hi"]},"stdin":false}`
	env := append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
	req := newRequest(t, "POST", ta.url+"/process.Process/Start", strings.NewReader(string(env)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set(TokenHeader, ta.token)
	resp, out := doHTTP(t, req)
	out = strings.ReplaceAll(out, " ", "") // protojson randomises spacing
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{`{"event":{"start":{"pid":`, `{"event":{"data":{"stdout":"aGkK"}}}`, `{"event":{"end":{"exited":true,"status":"exitstatus0"}}}`, "\x02\x00\x00\x00\x02{}"} {
		if !strings.Contains(out, want) {
			t.Errorf("response lacks %s: %q", want, out)
		}
	}
}

func TestInitRotatesToken(t *testing.T) {
	ta := newTestAgent(t, agentOpts{token: "boot"})
	ctx := ctxTimeout(t, 10*time.Second)
	resp, err := ta.agent.Init(ctx, connect.NewRequest(&agentv1.InitRequest{
		AccessToken:    "sandbox-token",
		EnvVars:        map[string]string{"FOO": "bar"},
		DefaultUser:    "nobody",
		DefaultWorkdir: "/tmp",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetVersion() == "" {
		t.Error("no version")
	}
	if _, err := ta.proc.List(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("old token still works: %v", err)
	}
	ta.token = "sandbox-token"
	stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: shell("echo $FOO $(id -un) $(pwd)")}))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, stream); r.stdout != "bar nobody /tmp\n" {
		t.Fatalf("stdout %q", r.stdout)
	}

	req := newRequest(t, "GET", ta.url+"/envs", nil)
	req.Header.Set(TokenHeader, "sandbox-token")
	if _, body := doHTTP(t, req); strings.TrimSpace(body) != `{"FOO":"bar"}` {
		t.Errorf("/envs = %s", body)
	}

	// The state is persisted root-only and a restarted agent resumes it.
	st, err := os.Stat(ta.state)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", st, err)
	}
	if dst, err := os.Stat(filepath.Dir(ta.state)); err != nil || dst.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v", dst, err)
	}
	s2, err := New(Config{StatePath: ta.state, BootToken: "boot", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.state.get(); got.Token != "sandbox-token" || got.DefaultUser != "nobody" || got.EnvVars["FOO"] != "bar" || got.DefaultWorkdir != "/tmp" {
		t.Fatalf("resumed state %+v", got)
	}

	if _, err := ta.agent.Init(ctx, connect.NewRequest(&agentv1.InitRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("init without token: %v", err)
	}
}

func TestSignedFiles(t *testing.T) {
	ta := newTestAgent(t, agentOpts{token: "tok"})
	dir := t.TempDir()
	path := filepath.Join(dir, "signed.txt")
	if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	signed := func(op, user, token, exp string) string {
		q := url.Values{"path": {path}, "signature": {Signature(path, op, user, token, exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return ta.url + "/files?" + q.Encode()
	}
	// The texts are envd's (validateSigning), signature checked before expiry.
	tampered := strings.Replace(signed("read", "", "tok", past), "signed.txt", "other.txt", 1)
	tests := []struct {
		name    string
		method  string
		url     string
		status  int
		message string
	}{
		{"read", "GET", signed("read", "", "tok", ""), 200, ""},
		{"read with user and expiry", "GET", signed("read", "root", "tok", future), 200, ""},
		{"expired", "GET", signed("read", "", "tok", past), 401, "signature is already expired"},
		{"expired and tampered", "GET", tampered, 401, "invalid signature"},
		{"wrong token", "GET", signed("read", "", "other", ""), 401, "invalid signature"},
		{"no signature", "GET", ta.url + "/files?path=" + url.QueryEscape(path), 401, "missing signature query parameter"},
		{"write signature used to read", "GET", signed("write", "", "tok", ""), 401, "invalid signature"},
		{"write", "POST", signed("write", "", "tok", future), 200, ""},
		{"read signature used to write", "POST", signed("read", "", "tok", ""), 401, "invalid signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, tt.method, tt.url, strings.NewReader("new"))
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, body := doHTTP(t, req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if tt.message != "" && (json.Unmarshal([]byte(body), &e) != nil || e.Code != tt.status || e.Message != tt.message) {
				t.Errorf("body %s, want message %q", body, tt.message)
			}
		})
	}
	t.Run("wrong header token", func(t *testing.T) {
		req := newRequest(t, "GET", ta.url+"/files?path="+url.QueryEscape(path), nil)
		req.Header.Set(TokenHeader, "nope")
		if resp, body := doHTTP(t, req); resp.StatusCode != 401 || !strings.Contains(body, "access token present in header but does not match") {
			t.Errorf("%d %s", resp.StatusCode, body)
		}
	})
}
