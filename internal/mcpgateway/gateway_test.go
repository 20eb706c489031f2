package mcpgateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary is also the MCP servers the gateway launches: with
// SPACE_MCPGW_TEST_SERVER set it serves that server's tools on stdio.
func TestMain(m *testing.M) {
	if dir := os.Getenv("SPACE_MCPGW_TEST_GATEWAY"); dir != "" && os.Getenv("SPACE_MCPGW_TEST_SERVER") == "" {
		// The gateway Launch starts: it serves for a while, then ends.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cat := Catalog{"upper": func(map[string]any) (Server, error) { return testServers("upper")[0], nil }}
		if err := Serve(ctx, cat, testPaths(dir), os.Getenv("SPACE_MCPGW_TEST_ADDR"), os.Stdin, os.NewFile(3, "ready"), nil); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	switch name := os.Getenv("SPACE_MCPGW_TEST_SERVER"); name {
	case "":
		os.Exit(m.Run())
	case "crash":
		os.Stderr.WriteString("no such database\n")
		os.Exit(3)
	default:
		testServer(name)
		os.Exit(0)
	}
}

type textIn struct {
	Text string `json:"text"`
}

func testServer(name string) {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	tool := map[string]string{"upper": "upper", "lower": "lower", "dup": "upper"}[name]
	mcp.AddTool(s, &mcp.Tool{Name: tool, Description: name + "'s tool"}, func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
		out := strings.ToUpper(in.Text)
		if tool == "lower" {
			out = strings.ToLower(in.Text)
		}
		// Each server says which of them answered.
		if os.Getenv(TokenEnv) != "" {
			out = "token leaked"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ":" + out}}}, nil, nil
	})
	_ = s.Run(context.Background(), &mcp.StdioTransport{})
}

func testServers(names ...string) []Server {
	var out []Server
	for _, n := range names {
		out = append(out, Server{Name: n, Command: os.Args[0], Env: []string{"SPACE_MCPGW_TEST_SERVER=" + n}})
	}
	return out
}

// bearer adds the gateway's token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestGatewayServesEveryServersTools(t *testing.T) {
	t.Setenv(TokenEnv, "not for the servers")
	ctx := t.Context()
	g, err := Start(ctx, testServers("upper", "lower"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	const token = "s3cret-token"
	srv := httptest.NewServer(g.Handler(token))
	t.Cleanup(srv.Close)

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	var names []string
	for tool, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"lower", "upper"}) {
		t.Fatalf("tools = %v, want lower and upper (unprefixed)", names)
	}
	for tool, want := range map[string]string{"upper": "upper:ABC", "lower": "lower:abc"} {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "aBc"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != want || res.IsError {
			t.Errorf("%s = %q (error %v), want %q", tool, got, res.IsError, want)
		}
	}
}

func TestGatewayNeedsTheToken(t *testing.T) {
	g, err := Start(t.Context(), testServers("upper"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	srv := httptest.NewServer(g.Handler("right"))
	t.Cleanup(srv.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Bearer righ", http.StatusUnauthorized},
		{"right", http.StatusUnauthorized},
		{"Bearer right", http.StatusOK}, // the control
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, res.StatusCode, tc.want)
		}
	}
}

func TestStartFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []Server
		want    string
	}{
		{"collision", testServers("upper", "dup"), `tool name collision: MCP servers "upper" and "dup" both have a tool "upper"`},
		{"server exits", testServers("upper", "crash"), `MCP server "crash":`},
		{"its stderr is told", testServers("crash"), "no such database"},
		{"no such command", []Server{{Name: "nope", Command: "/nonexistent/server"}}, `MCP server "nope": start /nonexistent/server`},
		{"install fails", []Server{{Name: "github/a/b", Command: "true", Dir: t.TempDir(), Install: "echo cannot build >&2; exit 4"}}, "cannot build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Start(t.Context(), tc.servers, nil, nil)
			if err == nil {
				g.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func testPaths(dir string) Paths {
	return Paths{TokenFile: filepath.Join(dir, "t", ".token"), ConfigFile: filepath.Join(dir, "t", "config.json"), LogFile: filepath.Join(dir, "log")}
}

// Launch returns once the gateway serves (its MCP servers must not hold
// the ready pipe open), and the gateway outlives it. A second one on the
// same port fails and leaves the first one's token.
func TestLaunch(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("SPACE_MCPGW_TEST_GATEWAY", dir)
	t.Setenv("SPACE_MCPGW_TEST_ADDR", addr)
	cat := Catalog{"upper": func(map[string]any) (Server, error) { return Server{}, nil }}
	done := make(chan error, 1)
	go func() { done <- Launch([]byte(`{"upper":{}}`), "tok", cat, testPaths(dir), os.Args[0], nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Launch did not return while the gateway serves")
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader("{}"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log, _ := os.ReadFile(testPaths(dir).LogFile)
		t.Fatalf("%v; the gateway's log:\n%s", err, log)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", res.StatusCode)
	}
	if b, err := os.ReadFile(testPaths(dir).TokenFile); err != nil || string(b) != "tok" {
		t.Fatalf("token file = %q, %v", b, err)
	}
	if fi, err := os.Stat(testPaths(dir).TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, %v", fi.Mode(), err)
	}
	err = Launch([]byte(`{"upper":{}}`), "other", cat, testPaths(dir), os.Args[0], nil)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("second gateway: %v", err)
	}
	if b, err := os.ReadFile(testPaths(dir).TokenFile); err != nil || string(b) != "tok" {
		t.Fatalf("token file after the second = %q, %v", b, err)
	}
}

// Launch refuses a config it cannot run before it starts anything, and
// reports what made the gateway fail.
func TestLaunchFailure(t *testing.T) {
	dir := t.TempDir()
	paths := testPaths(dir)
	err := Launch([]byte(`{"invalid_server":{}}`), "tok", NewCatalog("/x"), paths, "/nonexistent", nil)
	if err == nil || !strings.Contains(err.Error(), `unknown MCP server "invalid_server"`) {
		t.Fatalf("err = %v", err)
	}
	// A gateway that dies before it is ready: its exit is the error.
	err = Launch([]byte(`{"time":{}}`), "tok", NewCatalog("/x"), paths, "/bin/false", nil)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(paths.TokenFile); err == nil {
		t.Error("a gateway that did not start wrote the token")
	}
}
