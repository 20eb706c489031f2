package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/spacesandbox/space/client/apitypes"
)

// DesktopAction is one computer-use action, a model's tool input as it
// comes (POST /v1/sandboxes/{id}/desktop/actions): {"action":
// "left_click", "coordinate": [100, 200]}. Fields an action does not take
// must be left empty.
type DesktopAction struct {
	Action          string `json:"action"`
	Coordinate      []int  `json:"coordinate,omitempty"`
	StartCoordinate []int  `json:"start_coordinate,omitempty"`
	// Region is zoom's [x0, y0, x1, y1]: its answer's screenshot is that
	// part of the screen.
	Region          []int    `json:"region,omitempty"`
	Text            *string  `json:"text,omitempty"`
	ScrollDirection string   `json:"scroll_direction,omitempty"`
	ScrollAmount    *int     `json:"scroll_amount,omitempty"`
	Duration        *float64 `json:"duration,omitempty"`
	// Screenshot asks for a screenshot taken after the action settles.
	Screenshot bool `json:"screenshot,omitempty"`
}

// DesktopActionResult is the answer to an action: where the cursor is,
// the screen's size, and the screenshot (PNG) if one was asked for.
type DesktopActionResult = apitypes.DesktopActionResult

// DesktopScreenshot is the PNG of a desktop sandbox's screen, scaled down
// to width pixels wide (0: as it is).
func (c *Client) DesktopScreenshot(ctx context.Context, id string, width int) ([]byte, error) {
	var q url.Values
	if width > 0 {
		q = url.Values{"width": {strconv.Itoa(width)}}
	}
	u, err := c.endpoint(q, "v1", "sandboxes", id, "desktop", "screenshot")
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", id, err)
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", id, err)
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("screenshot of %s: %w", id, err)
	}
	return b, nil
}

// DesktopAct runs one action on a desktop sandbox.
func (c *Client) DesktopAct(ctx context.Context, id string, a DesktopAction) (*DesktopActionResult, error) {
	var out DesktopActionResult
	if err := c.call(ctx, http.MethodPost, nil, a, &out, "v1", "sandboxes", id, "desktop", "actions"); err != nil {
		return nil, fmt.Errorf("desktop %s on %s: %w", a.Action, id, err)
	}
	return &out, nil
}

// DesktopVNC connects to a desktop sandbox's screen as a viewer does
// (GET /v1/sandboxes/{id}/desktop/vnc): the connection carries RFB, the
// VNC protocol, both ways, starting with the server's version line. It
// ends when ctx ends or the caller closes it.
func (c *Client) DesktopVNC(ctx context.Context, id string) (net.Conn, error) {
	u, err := c.endpoint(nil, "v1", "sandboxes", id, "desktop", "vnc")
	if err != nil {
		return nil, fmt.Errorf("vnc of %s: %w", id, err)
	}
	h := http.Header{}
	c.authorize(h)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h, Subprotocols: []string{"binary"}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			err = decodeError(resp)
		}
		return nil, fmt.Errorf("vnc of %s: %w", id, err)
	}
	conn.SetReadLimit(1 << 24) // a full-screen raw update of a large screen
	return websocket.NetConn(ctx, conn, websocket.MessageBinary), nil
}
