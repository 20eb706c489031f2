package agent

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/api/envd/filesystem/filesystemconnect"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
)

type testAgent struct {
	srv   *Server
	url   string
	state string
	token string
	proc  processconnect.ProcessClient
	fs    filesystemconnect.FilesystemClient
	agent agentv1connect.AgentClient
}

type agentOpts struct {
	token       string
	bufferBytes int
	noToken     bool
}

func newTestAgent(t *testing.T, o agentOpts) *testAgent {
	t.Helper()
	if o.token == "" && !o.noToken {
		o.token = "boot-token"
	}
	statePath := filepath.Join(t.TempDir(), "state", "state.json")
	s, err := New(Config{
		StatePath:          statePath,
		BootToken:          o.token,
		DefaultUser:        "root",
		ProcessBufferBytes: o.bufferBytes,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); s.Close() })
	ta := &testAgent{srv: s, url: hs.URL, state: statePath, token: o.token}
	ta.proc = processconnect.NewProcessClient(hs.Client(), hs.URL, ta.clientOpts(func() string { return ta.token })...)
	ta.fs = filesystemconnect.NewFilesystemClient(hs.Client(), hs.URL, ta.clientOpts(func() string { return ta.token })...)
	ta.agent = agentv1connect.NewAgentClient(hs.Client(), hs.URL, ta.clientOpts(func() string { return ta.token })...)
	return ta
}

// clientOpts makes clients speak Connect+JSON like the E2B SDKs, with the token.
func (ta *testAgent) clientOpts(token func() string) []connect.ClientOption {
	return []connect.ClientOption{connect.WithProtoJSON(), connect.WithInterceptors(tokenInterceptor(token))}
}

type tokenInterceptor func() string

func (f tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if tok := f(); tok != "" && req.Header().Get(TokenHeader) == "" {
			req.Header().Set(TokenHeader, tok)
		}
		return next(ctx, req)
	}
}

func (f tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if tok := f(); tok != "" && conn.RequestHeader().Get(TokenHeader) == "" {
			conn.RequestHeader().Set(TokenHeader, tok)
		}
		return conn
	}
}

func (f tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func basicUser(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// result is a Start stream collected to its end.
type result struct {
	pid    uint32
	events []*process.ProcessEvent
	stdout string
	stderr string
	pty    string
	end    *process.ProcessEvent_EndEvent
}

func collect[T interface{ GetEvent() *process.ProcessEvent }](t *testing.T, stream interface {
	Receive() bool
	Msg() T
	Err() error
}) result {
	t.Helper()
	var r result
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		r.events = append(r.events, ev)
		switch {
		case ev.GetStart() != nil:
			if len(r.events) != 1 {
				t.Errorf("start event at position %d", len(r.events))
			}
			r.pid = ev.GetStart().GetPid()
		case ev.GetData() != nil:
			r.stdout += string(ev.GetData().GetStdout())
			r.stderr += string(ev.GetData().GetStderr())
			r.pty += string(ev.GetData().GetPty())
		case ev.GetEnd() != nil:
			if r.end != nil {
				t.Errorf("second end event")
			}
			r.end = ev.GetEnd()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if r.end == nil {
		t.Fatalf("no end event")
	}
	if len(r.events) == 0 || r.events[0].GetStart() == nil {
		t.Fatalf("first event is not start")
	}
	return r
}

func shell(script string) *process.ProcessConfig {
	return &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

func ptr[T any](v T) *T { return &v }

func doHTTP(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
