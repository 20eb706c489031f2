package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/coder/websocket"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
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
func (s *Server) OpenPTY(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.OpenPTYParams) {
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
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := s.commands.StartCommand(ctx, id, sandbox.CommandSpec{
		Argv: []string{"/bin/bash", "-i", "-l"},
		Env:  map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
		User: r.URL.Query().Get("user"),
		PTY:  &sandbox.PTYSize{Cols: cols, Rows: rows},
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer stream.Close()
	defer stream.Signal(context.WithoutCancel(ctx), syscall.SIGKILL)

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
				err = stream.SendPTY(ctx, data)
			} else {
				var c ptyControl
				if json.Unmarshal(data, &c) == nil && c.Type == "resize" && c.Cols > 0 && c.Rows > 0 {
					err = stream.ResizePTY(ctx, sandbox.PTYSize{Cols: c.Cols, Rows: c.Rows})
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Shell -> client.
	for stream.Next() {
		ev := stream.Event()
		switch ev.Kind {
		case sandbox.CommandPTY:
			wctx, wcancel := context.WithTimeout(wsCtx, 30*time.Second)
			err := conn.Write(wctx, websocket.MessageBinary, ev.Data)
			wcancel()
			if err != nil {
				return
			}
		case sandbox.CommandEnded:
			code := ev.End.ExitCode
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
