package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/spacesandbox/space/api/native"
	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Desktop drives the displays of desktop sandboxes (desktop.Client).
type Desktop interface {
	Screenshot(ctx context.Context, sandboxID string, width int) ([]byte, error)
	Act(ctx context.Context, sandboxID string, a computeruse.Action) (computeruse.Result, error)
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
	a := computeruse.Action{Action: string(req.Action), Coordinate: deref(req.Coordinate), StartCoordinate: deref(req.StartCoordinate),
		Text: req.Text, ScrollDirection: string(deref(req.ScrollDirection)), ScrollAmount: req.ScrollAmount, Duration: req.Duration,
		Screenshot: deref(req.Screenshot)}
	res, err := s.desktop.Act(r.Context(), id, a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
