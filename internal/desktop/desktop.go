// Package desktop is spaced's client of the native computer-use server
// inside a desktop sandbox (space-desktop on computeruse.Port,
// cmd/space-desktop), for the native API's /v1/sandboxes/{id}/desktop
// routes: a screenshot, and one action of a model's computer-use tool.
//
// It speaks the server's wire (internal/computeruse) over the sandbox's
// veth with the token accesstoken.Desktop derives from the sandbox's
// access token (never the access token itself: any process in the
// sandbox could be the one listening on the port), and turns every
// answer that is not a success into an errdefs class whose message a
// client may see.
package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Bounds on the server's answers: a screenshot (a 4K screen's PNG at
// BestSpeed stays well below), an action's JSON (with one, base64) and
// an error's words.
const (
	maxPNGBytes    = 64 << 20
	maxResultBytes = maxPNGBytes*4/3 + 4096
	maxErrorBytes  = 512
)

// Options configure a Client.
type Options struct {
	// Target finds a running sandbox (sandbox.Targets.Target).
	Target sandbox.TargetFunc
	// Dial connects to a sandbox address; nil is sandbox.DefaultDial.
	Dial sandbox.DialFunc
}

// Client talks to the desktops of the sandboxes on this node. It is safe
// for concurrent use.
type Client struct {
	target sandbox.TargetFunc
	http   *http.Client
	// stream carries the viewer's connections, which last as long as the
	// viewer watches and may be silent while the screen is still: no
	// bounds but the caller's context and the sandbox's life.
	stream *http.Client
}

// New returns a Client.
func New(o Options) *Client {
	return &Client{
		target: o.Target,
		// A wait or hold_key action lasts up to computeruse.MaxWait; every
		// call is bounded by its context besides.
		http: &http.Client{
			Transport: sandbox.NewPortTransport(o.Target, o.Dial, computeruse.Port),
			Timeout:   time.Duration(computeruse.MaxWait)*time.Second + time.Minute,
		},
		stream: &http.Client{Transport: sandbox.NewPortTransport(o.Target, o.Dial)},
	}
}

// VNC connects to sandbox id's screen: the connection carries RFB (the
// VNC protocol) both ways, served by a VNC server inside the sandbox that
// space-desktop starts on the first viewer. It ends with ctx, when the
// caller closes it, or when the sandbox stops or pauses.
func (c *Client) VNC(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	t, err := c.target(id)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sandbox.PortURL(id, computeruse.Port, "/vnc"), nil)
	if err != nil {
		return nil, fmt.Errorf("desktop request: %w", err)
	}
	req.Header.Set("X-Access-Token", accesstoken.Desktop(t.AccessToken))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", computeruse.VNCUpgrade)
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, transportError(ctx, id, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, statusError(id, req.Method, "/vnc", resp)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, errdefs.New(errdefs.ErrUnavailable, "the desktop of sandbox %s answered the viewer without a connection", id)
	}
	return rwc, nil
}

// Screenshot is sandbox id's screen as a PNG, scaled down to width pixels
// wide (keeping its aspect) when width is above 0 and below the screen's.
func (c *Client) Screenshot(ctx context.Context, id string, width int) ([]byte, error) {
	path := "/screenshot"
	if width > 0 {
		path += "?width=" + strconv.Itoa(width)
	}
	resp, err := c.do(ctx, id, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPNGBytes+1))
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "the screenshot of sandbox %s was cut off", id)
	}
	if len(b) > maxPNGBytes {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the screenshot of sandbox %s is larger than %d bytes", id, maxPNGBytes)
	}
	return b, nil
}

// Act runs one action on sandbox id's desktop. What the screen itself
// decides (a coordinate off it, a key its keyboard cannot make) is
// checked there; the rest is checked here first, so that a bad action
// never reaches the sandbox.
func (c *Client) Act(ctx context.Context, id string, a computeruse.Action) (computeruse.Result, error) {
	if err := a.Validate(computeruse.Size{}); err != nil {
		return computeruse.Result{}, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "%s", err)
	}
	body, err := json.Marshal(a)
	if err != nil {
		return computeruse.Result{}, fmt.Errorf("encode action: %w", err)
	}
	resp, err := c.do(ctx, id, http.MethodPost, "/actions", body)
	if err != nil {
		return computeruse.Result{}, err
	}
	defer resp.Body.Close()
	var res computeruse.Result
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResultBytes)).Decode(&res); err != nil {
		return computeruse.Result{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "the desktop of sandbox %s answered an action unreadably", id)
	}
	return res, nil
}

func (c *Client) do(ctx context.Context, id, method, path string, body []byte) (*http.Response, error) {
	// Looked up per request: a pooled connection would not notice that
	// the sandbox stopped.
	t, err := c.target(id)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, sandbox.PortURL(id, computeruse.Port, path), rd)
	if err != nil {
		return nil, fmt.Errorf("desktop request: %w", err)
	}
	req.Header.Set("X-Access-Token", accesstoken.Desktop(t.AccessToken))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, id, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, statusError(id, method, path, resp)
	}
	return resp, nil
}

// transportError classifies a failure to reach the desktop's server.
func transportError(ctx context.Context, id string, err error) error {
	var uerr *url.Error
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errdefs.Class(err) != nil:
		return err // the sandbox lookup at dial time: not running
	case errors.Is(err, syscall.ECONNREFUSED):
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err,
			"sandbox %s has no desktop: create it from the desktop template (or one whose start command runs space-desktop on port %d)", id, computeruse.Port)
	case errors.As(err, &uerr) && uerr.Timeout():
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "the desktop of sandbox %s did not answer in time", id)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "the desktop of sandbox %s is not reachable", id)
}

// statusError classifies an error answer; the server's words (plain text)
// are shown where they describe the caller's request.
func statusError(id, method, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes+1))
	msg := strings.TrimSpace(string(b))
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes] + "..."
	}
	cause := fmt.Errorf("desktop: %s %s: HTTP %d: %q", method, path, resp.StatusCode, msg)
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return errdefs.Wrap(errdefs.ErrInvalidArgument, cause, "%s", msg)
	case http.StatusConflict:
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, cause, "sandbox %s: %s", id, msg)
	case http.StatusUnauthorized:
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, cause,
			"the desktop server of sandbox %s refused the sandbox's token: it must run as root to read the agent's state file", id)
	case http.StatusNotFound:
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, cause,
			"sandbox %s: what listens on port %d is not space-desktop", id, computeruse.Port)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, cause, "the desktop of sandbox %s failed: %s", id, msg)
}
