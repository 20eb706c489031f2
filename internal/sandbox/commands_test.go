package sandbox

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/errdefs"
)

// noAgents runs nothing: every sandbox is gone.
type noAgents struct{ asked []string }

func (n *noAgents) Agent(id string) (*AgentConn, error) {
	n.asked = append(n.asked, id)
	return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is killed", id)
}

// TestCommandsAndFilesWithoutASandbox: Commands and Files stand on an
// agent lookup alone; a sandbox that is not running is not_found from
// every method, after asking for that sandbox, and a command with no
// program is refused before anything is asked.
func TestCommandsAndFilesWithoutASandbox(t *testing.T) {
	ctx := context.Background()
	agents := &noAgents{}
	cmds, files := NewCommands(agents, nil), NewFiles(agents)
	for name, call := range map[string]func() error{
		"StartCommand":  func() error { _, err := cmds.StartCommand(ctx, "sb1", CommandSpec{Argv: []string{"true"}}); return err },
		"AttachCommand": func() error { _, err := cmds.AttachCommand(ctx, "sb1", 5, 0); return err },
		"ListCommands":  func() error { _, err := cmds.ListCommands(ctx, "sb1"); return err },
		"SendStdin":     func() error { return cmds.SendStdin(ctx, "sb1", 5, nil) },
		"CloseStdin":    func() error { return cmds.CloseStdin(ctx, "sb1", 5) },
		"SignalCommand": func() error { return cmds.SignalCommand(ctx, "sb1", 5, 9) },
		"StatFile":      func() error { _, err := files.StatFile(ctx, "sb1", "/x"); return err },
		"RemoveFile":    func() error { return files.RemoveFile(ctx, "sb1", "/x") },
		"ListDir":       func() error { _, err := files.ListDir(ctx, "sb1", "/", 1); return err },
		"MakeDir":       func() error { _, err := files.MakeDir(ctx, "sb1", "/d"); return err },
		"MoveFile":      func() error { _, err := files.MoveFile(ctx, "sb1", "/a", "/b"); return err },
		"ReadFile":      func() error { _, err := files.ReadFile(ctx, "sb1", "/x", ""); return err },
		"WriteFile":     func() error { _, err := files.WriteFile(ctx, "sb1", "/x", strings.NewReader("x"), 1); return err },
		"WatchDir":      func() error { _, err := files.WatchDir(ctx, "sb1", "/", false); return err },
	} {
		agents.asked = nil
		if err := call(); errdefs.Class(err) != errdefs.ErrNotFound {
			t.Errorf("%s: %v, want not_found", name, err)
		}
		if len(agents.asked) != 1 || agents.asked[0] != "sb1" {
			t.Errorf("%s asked for %v, want sb1 once", name, agents.asked)
		}
	}
	agents.asked = nil
	if _, err := cmds.StartCommand(ctx, "sb1", CommandSpec{}); errdefs.Class(err) != errdefs.ErrInvalidArgument || len(agents.asked) != 0 {
		t.Errorf("a command with no program: %v after asking %v, want invalid_argument before asking", err, agents.asked)
	}
}

// execAgent answers Agent.Exec with a start and an end event, and drops
// the connection of the first dropFirst requests after reading them (a
// kept-alive connection that dies under a request).
type execAgent struct {
	agentv1connect.UnimplementedAgentHandler
	mu        sync.Mutex
	keys      []string
	dropFirst int
	code      connect.Code // answer every Exec with this error instead
}

func (a *execAgent) Exec(_ context.Context, req *connect.Request[agentv1.ExecRequest], stream *connect.ServerStream[agentv1.ExecEvent]) error {
	if a.code != 0 {
		return connect.NewError(a.code, errors.New("refused"))
	}
	start := &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 42}}}
	end := &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{Exited: true}}}
	if err := stream.Send(&agentv1.ExecEvent{Seq: 1, Event: start}); err != nil {
		return err
	}
	return stream.Send(&agentv1.ExecEvent{Seq: 2, Event: end})
}

func (a *execAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.keys = append(a.keys, r.Header.Get(agentv1.IdempotencyKeyHeader))
	drop := len(a.keys) <= a.dropFirst
	a.mu.Unlock()
	if drop {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	_, h := agentv1connect.NewAgentHandler(a)
	h.ServeHTTP(w, r)
}

// TestStartCommandSentAgainOnALostConnection: a start whose connection
// dies before its first event is sent once more with the same key (the
// agent starts a key's command once); a second loss, or an answer of the
// agent's own, is the caller's.
func TestStartCommandSentAgainOnALostConnection(t *testing.T) {
	cases := []struct {
		name     string
		key      string
		drop     int
		code     connect.Code
		wantErr  error
		wantSent int
	}{
		{name: "first connection lost", drop: 1, wantSent: 2},
		{name: "the caller's key is kept", key: "client-key", drop: 1, wantSent: 2},
		{name: "lost twice", drop: 2, wantErr: errdefs.ErrUnavailable, wantSent: 2},
		{name: "the agent's own refusal is not sent again", code: connect.CodeInvalidArgument, wantErr: errdefs.ErrInvalidArgument, wantSent: 1},
		{name: "no loss", wantSent: 1},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := netip.AddrFrom4([4]byte{127, 77, byte(rand.IntN(250)), byte(2 + i)})
			ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, AgentPort).String())
			if err != nil {
				t.Fatal(err)
			}
			agent := &execAgent{dropFirst: c.drop, code: c.code}
			srv := &http.Server{Handler: agent}
			go srv.Serve(ln)
			defer srv.Close()
			conn := newAgentConn(addr, "tok")
			defer conn.Close()
			st, err := conn.startCommand(context.Background(), CommandSpec{Argv: []string{"true"}, Key: c.key})
			if c.wantErr != nil {
				if errdefs.Class(err) != c.wantErr {
					t.Fatalf("error %v, want %s", err, c.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				st.Close()
			}
			agent.mu.Lock()
			defer agent.mu.Unlock()
			if len(agent.keys) != c.wantSent {
				t.Fatalf("sent %d times, want %d", len(agent.keys), c.wantSent)
			}
			for _, k := range agent.keys {
				if k == "" || k != agent.keys[0] || (c.key != "" && k != c.key) {
					t.Fatalf("keys %q: want one key throughout (the caller's when it gave one)", agent.keys)
				}
			}
		})
	}
}
