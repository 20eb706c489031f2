package httpapi

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/coder/websocket"

	"github.com/spacesandbox/space/api/native"
	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Desktop drives the displays of desktop sandboxes (desktop.Client).
type Desktop interface {
	Screenshot(ctx context.Context, sandboxID string, width int) ([]byte, error)
	Act(ctx context.Context, sandboxID string, a computeruse.Action) (computeruse.Result, error)
	// VNC connects to the screen: RFB both ways, until ctx ends or the
	// connection is closed.
	VNC(ctx context.Context, sandboxID string) (io.ReadWriteCloser, error)
}

func (s *Server) DesktopScreenshot(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.DesktopScreenshotParams) {
	if s.desktop == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this server has no desktop client"))
		return
	}
	width := 0
	if params.Width != nil {
		width = *params.Width
	}
	png, err := s.desktop.Screenshot(r.Context(), id, width)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Header().Set("Cache-Control", "no-store")
	w.Write(png)
}

func (s *Server) DesktopAction(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	if s.desktop == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this server has no desktop client"))
		return
	}
	var req native.DesktopActionJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	a := computeruse.Action{Action: string(req.Action), Coordinate: deref(req.Coordinate), StartCoordinate: deref(req.StartCoordinate), Region: deref(req.Region),
		Text: req.Text, ScrollDirection: string(deref(req.ScrollDirection)), ScrollAmount: req.ScrollAmount, Duration: req.Duration,
		Screenshot: deref(req.Screenshot)}
	res, err := s.desktop.Act(r.Context(), id, a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// DesktopVNC relays the screen's RFB between a WebSocket (binary frames)
// and the sandbox's VNC server. The sandbox is reached first, so that a
// sandbox without a desktop answers 409 before any upgrade.
func (s *Server) DesktopVNC(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	if s.desktop == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this server has no desktop client"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	up, err := s.desktop.VNC(ctx, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer up.Close()
	// noVNC's RFB client asks for the "binary" subprotocol.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return // Accept has answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	// The WebSocket outlives the request's context so that a viewer whose
	// key was revoked is told why before it is closed.
	wsCtx, wsCancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer wsCancel()
	ws := websocket.NetConn(wsCtx, conn, websocket.MessageBinary)
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, ws); done <- struct{}{} }()
	go func() { io.Copy(ws, up); done <- struct{}{} }()
	select {
	case <-done:
		conn.Close(websocket.StatusNormalClosure, "the screen's connection ended")
	case <-ctx.Done():
		if msg, ok := revoked(r.Context()); ok {
			conn.Close(websocket.StatusPolicyViolation, msg)
			return
		}
		conn.Close(websocket.StatusGoingAway, "the request ended")
	}
}
