package mcpgateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TokenEnv is the variable the E2B SDKs pass the gateway's token in. It is
// not passed on to the MCP servers.
const TokenEnv = "GATEWAY_ACCESS_TOKEN"

// implementation is what the gateway calls itself, to clients and servers.
var implementation = &mcp.Implementation{Name: "space-mcp-gateway", Version: "1.0.0"}

// Gateway is the running MCP servers, served as one MCP server.
type Gateway struct {
	server   *mcp.Server
	sessions []*mcp.ClientSession
	log      *slog.Logger
}

// Start launches every server (concurrently), lists its tools and serves
// them all under their own names. A server that cannot start, or two
// servers with a tool of the same name, fail the whole start: nothing is
// left running. Each server's stderr goes to stderr (and its last lines
// into the error when it fails).
func Start(ctx context.Context, servers []Server, stderr io.Writer, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{server: mcp.NewServer(implementation, &mcp.ServerOptions{Logger: log}), log: log}
	type started struct {
		sess  *mcp.ClientSession
		tools []*mcp.Tool
		err   error
	}
	results := make([]started, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			sess, tools, err := launch(ctx, srv, stderr, log)
			results[i] = started{sess, tools, err}
		})
	}
	wg.Wait()
	var errs []error
	for _, r := range results {
		if r.sess != nil {
			g.sessions = append(g.sessions, r.sess)
		}
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		g.Close()
		return nil, err
	}
	owner := map[string]string{}
	for i, r := range results {
		for _, t := range r.tools {
			if prev, ok := owner[t.Name]; ok {
				g.Close()
				return nil, fmt.Errorf("tool name collision: MCP servers %q and %q both have a tool %q", prev, servers[i].Name, t.Name)
			}
			owner[t.Name] = servers[i].Name
			if err := g.addTool(r.sess, t); err != nil {
				g.Close()
				return nil, fmt.Errorf("MCP server %q: %w", servers[i].Name, err)
			}
		}
		log.Info("MCP server started", "server", servers[i].Name, "tools", len(r.tools))
	}
	return g, nil
}

// addTool serves t, forwarding its calls to sess.
func (g *Gateway) addTool(sess *mcp.ClientSession, t *mcp.Tool) (err error) {
	defer func() {
		// The SDK panics on a tool it finds malformed (no object schema).
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %q: %v", t.Name, p)
		}
	}()
	name := t.Name
	g.server.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Meta: req.Params.Meta, Name: name}
		if len(req.Params.Arguments) > 0 {
			p.Arguments = req.Params.Arguments
		}
		return sess.CallTool(ctx, p)
	})
	return nil
}

// launch prepares (clone, install) and starts one server, and lists its
// tools.
func launch(ctx context.Context, srv Server, stderr io.Writer, log *slog.Logger) (*mcp.ClientSession, []*mcp.Tool, error) {
	tail := &tailBuffer{max: 2048}
	out := io.MultiWriter(tail, prefixWriter{w: stderr, prefix: "[" + srv.Name + "] "})
	fail := func(err error) error {
		if t := strings.TrimSpace(tail.String()); t != "" {
			return fmt.Errorf("MCP server %q: %w: %s", srv.Name, err, t)
		}
		return fmt.Errorf("MCP server %q: %w", srv.Name, err)
	}
	if err := prepare(ctx, srv, out); err != nil {
		return nil, nil, fail(err)
	}
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Dir = srv.Dir
	cmd.Env = append(serverEnv(os.Environ()), srv.Env...)
	cmd.Stderr = out
	client := mcp.NewClient(implementation, &mcp.ClientOptions{Logger: log})
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, nil, fail(fmt.Errorf("start %s: %w", srv.Command, err))
	}
	var tools []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return sess, nil, fail(fmt.Errorf("list tools: %w", err))
		}
		tools = append(tools, t)
	}
	return sess, tools, nil
}

// prepare clones a GitHub server's repository when it is not there yet and
// runs its install command.
func prepare(ctx context.Context, srv Server, out io.Writer) error {
	run := func(dir, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(serverEnv(os.Environ()), srv.Env...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return nil
	}
	if srv.Repo != "" {
		if _, err := os.Stat(srv.Dir); errors.Is(err, os.ErrNotExist) {
			if err := run("", "git", "clone", "--depth", "1", srv.Repo, srv.Dir); err != nil {
				return err
			}
		}
	}
	if srv.Install != "" {
		return run(srv.Dir, "sh", "-c", srv.Install)
	}
	return nil
}

// serverEnv is the gateway's environment without its token.
func serverEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, TokenEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Handler serves the gateway at /mcp (MCP streamable HTTP) to requests
// with "Authorization: Bearer <token>"; others get 401.
func (g *Gateway) Handler(token string) http.Handler {
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &mcp.StreamableHTTPOptions{
		Logger: g.log,
		// The gateway is reached through spaced's port proxy, whose
		// requests come from inside the sandbox with the sandbox's host
		// name: the token, not the Host header, is what guards it.
		DisableLocalhostProtection: true,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", requireToken(token, mcpHandler))
	return mux
}

func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"the MCP gateway needs Authorization: Bearer <the sandbox's MCP token>"}`+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Close ends every server (closing its stdin, then signals).
func (g *Gateway) Close() {
	var wg sync.WaitGroup
	for _, s := range g.sessions {
		wg.Go(func() { _ = s.Close() })
	}
	wg.Wait()
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// prefixWriter writes each chunk with a prefix (a server's name in the
// gateway's log).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if p.w == nil {
		return len(b), nil
	}
	line := append(append([]byte(p.prefix), bytes.TrimRight(b, "\n")...), '\n')
	_, err := p.w.Write(line)
	return len(b), err
}

// startTimeout bounds launching every server: the SDKs' command timeout is
// 60 s, and the gateway must answer before it.
const startTimeout = 50 * time.Second
