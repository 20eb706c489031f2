package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/errdefs"
)

type ptyControl struct {
	Type     string `json:"type"`
	Cols     uint32 `json:"cols,omitempty"`
	Rows     uint32 `json:"rows,omitempty"`
	ExitCode *int32 `json:"exit_code,omitempty"`
}

func sizeParam(r *http.Request, name string, def int) (uint32, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return uint32(def), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "%s must be an integer from 1 to 1000", name)
	}
	return uint32(n), nil
}

// openPTY runs an interactive login shell on a PTY and joins it to a
// WebSocket. The shell is killed when the WebSocket closes, as a terminal
// hang-up would.
func (s *Server) openPTY(w http.ResponseWriter, r *http.Request) {
	cols, err := sizeParam(r, "cols", 80)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rows, err := sizeParam(r, "rows", 24)
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := agent.Agent.Exec(ctx, connect.NewRequest(&agentv1.ExecRequest{
		User: r.URL.Query().Get("user"),
		Start: &process.StartRequest{
			Process: &process.ProcessConfig{
				Cmd: "/bin/bash", Args: []string{"-i", "-l"},
				Envs: map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
			},
			Pty: &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}},
		},
	}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		writeError(w, r, fromAgent(stream.Err()))
		return
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	defer agent.Process.SendSignal(context.WithoutCancel(ctx), connect.NewRequest(&process.SendSignalRequest{
		Process: sel, Signal: process.Signal_SIGNAL_SIGKILL,
	}))

	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	// The WebSocket's own reads and writes outlive the request's context:
	// a read or write whose context ends drops the connection without a
	// close frame, and a terminal whose key was revoked must be told why.
	wsCtx, wsCancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer wsCancel()

	// Client -> shell.
	go func() {
		defer cancel()
		for {
			typ, data, err := conn.Read(wsCtx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				_, err = agent.Process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
					Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}},
				}))
			} else {
				var c ptyControl
				if json.Unmarshal(data, &c) == nil && c.Type == "resize" && c.Cols > 0 && c.Rows > 0 {
					_, err = agent.Process.Update(ctx, connect.NewRequest(&process.UpdateRequest{
						Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: c.Cols, Rows: c.Rows}},
					}))
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Shell -> client.
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData().GetPty(); d != nil {
			wctx, wcancel := context.WithTimeout(wsCtx, 30*time.Second)
			err := conn.Write(wctx, websocket.MessageBinary, d)
			wcancel()
			if err != nil {
				return
			}
		}
		if end := ev.GetEnd(); end != nil {
			code := end.GetExitCode()
			msg, _ := json.Marshal(ptyControl{Type: "exit", ExitCode: &code})
			conn.Write(wsCtx, websocket.MessageText, msg)
			conn.Close(websocket.StatusNormalClosure, "exited")
			return
		}
	}
	if msg, ok := revoked(r.Context()); ok {
		conn.Close(websocket.StatusPolicyViolation, msg)
		return
	}
	conn.Close(websocket.StatusInternalError, "terminal stream ended")
}
