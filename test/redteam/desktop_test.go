package redteam

// A desktop sandbox's servers (docs/desktop.md) as an attacker sees them:
// noVNC (6080), Chromium's DevTools (9222) and the computer-use API's
// space-desktop (49990) are ports of the sandbox like any other, reached
// through spaced's port routing; X11 (6000+) must not be reachable over
// TCP at all. These attempts run on the suite's base template, whose
// neighbour sandbox runs stand-ins on those ports (an HTTP server each):
// what stops the attempts is spaced's port routing and the network's
// isolation, not the servers. The desktop template itself (its X server
// opening no TCP port, space-desktop's own token check, the viewer's
// WebSocket) is tested in test/desktop and internal/desktopd.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// desktopPorts are a desktop's servers' ports: noVNC, DevTools,
// space-desktop.
var desktopPorts = []struct {
	port int
	name string
}{{6080, "novnc"}, {9222, "devtools"}, {49990, "computer-use"}}

// x11Ports are the X server's TCP ports (displays :0 and :1) and the VNC
// servers' (the SDK's x11vnc and the console viewer's).
var x11Ports = []int{6000, 6001, 5900, 5910}

var standInsOnce sync.Once
var standInsErr error

// desktopStandIns starts, once, an HTTP server on every desktop and X11
// port in sandbox id, answering "stand-in <port>".
func desktopStandIns(t *testing.T, d *harness.Daemon, id string) error {
	standInsOnce.Do(func() {
		var ports []string
		for _, p := range desktopPorts {
			ports = append(ports, strconv.Itoa(p.port))
		}
		for _, p := range x11Ports {
			ports = append(ports, strconv.Itoa(p))
		}
		script := `import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s):
        s.send_response(200); s.end_headers(); s.wfile.write(b"stand-in %d\n" % s.server.server_port)
    def log_message(s, *a): pass
ss = [http.server.ThreadingHTTPServer(("0.0.0.0", p), H) for p in (` + strings.Join(ports, ", ") + `,)]
for s in ss[1:]: threading.Thread(target=s.serve_forever, daemon=True).start()
ss[0].serve_forever()`
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := d.Client.StartBackground(ctx, id, client.CommandRequest{Cmd: "python3 -c '" + script + "'", Tag: "rt-desktop-stand-ins", TimeoutSeconds: 3600}); err != nil {
			standInsErr = err
			return
		}
		// Ready when the last port answers inside.
		last := ports[len(ports)-1]
		if !harness.WaitFor(15*time.Second, func() bool {
			r := run(t, d, id, client.CommandRequest{Cmd: "curl -s http://127.0.0.1:" + last + "/"})
			return strings.Contains(r.Stdout, "stand-in "+last)
		}) {
			standInsErr = fmt.Errorf("the stand-ins in %s did not answer", id)
		}
	})
	return standInsErr
}

// trafficToken is a sandbox's token for its private ports, as spaced
// derives it from the sandbox's access token (e2bcompat.trafficToken) and
// E2B's create answers it as trafficAccessToken.
func trafficToken(accessToken string) string {
	m := hmac.New(sha256.New, []byte(accessToken))
	m.Write([]byte("e2b-traffic-access-token"))
	return hex.EncodeToString(m.Sum(nil))[:40]
}

// port sends GET / to port of sandbox id through spaced's port routing,
// named by headers (or, with byHost, by a <port>-<id> Host), with hdr
// added and no API key unless hdr sets one.
func (f *cpFixture) port(id string, port int, byHost bool, hdr map[string]string) (int, []byte, error) {
	h := map[string]string{"Authorization": ""}
	if byHost {
		h["Host"] = strconv.Itoa(port) + "-" + id + ".example.com"
	} else {
		h["E2b-Sandbox-Id"], h["E2b-Sandbox-Port"] = id, strconv.Itoa(port)
	}
	for k, v := range hdr {
		h[k] = v
	}
	return f.req("GET", "/", nil, h)
}

// standIn: the request reached the stand-in on port.
func standIn(port int) func(int, []byte, error) error {
	return func(status int, body []byte, err error) error {
		if err != nil {
			return err
		}
		if status != 200 || !strings.Contains(string(body), "stand-in "+strconv.Itoa(port)) {
			return fmt.Errorf("status %d, want 200 from the stand-in on %d; body %.200s", status, port, body)
		}
		return nil
	}
}

// sameAs: the answer is exactly want's (status and body).
func sameAs(ws int, wb []byte, werr error) func(int, []byte, error) error {
	return func(status int, body []byte, err error) error {
		if err != nil || werr != nil {
			return fmt.Errorf("%v / %v", err, werr)
		}
		if status != ws || string(body) != string(wb) {
			return fmt.Errorf("answered %d %.200q, not as a random token is (%d %.200q)", status, body, ws, wb)
		}
		return nil
	}
}

func desktopPortAttempts(f *cpFixture) []attempt {
	const stops = "e2bcompat port routing: a private sandbox's ports need its traffic token (e2b-traffic-access-token, derived from its access token) or its access token, compared in constant time; nothing else opens them"
	var out []attempt
	for _, p := range desktopPorts {
		ctl := "the same request with the sandbox's own traffic token reaches the stand-in on the port (200)"
		control := func(t *testing.T) error {
			if err := desktopStandIns(t, f.d, f.b.ID); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			for _, byHost := range []bool{false, true} {
				if err := standIn(p.port)(f.port(f.b.ID, p.port, byHost, map[string]string{"E2b-Traffic-Access-Token": trafficToken(f.b.AccessToken)})); err != nil {
					return fmt.Errorf("control (by host %v): %w", byHost, err)
				}
			}
			return nil
		}
		out = append(out,
			attempt{id: "cp-desktop-" + p.name + "-notoken", family: "cp-desktop-ports", stops: stops, control: ctl,
				desc: fmt.Sprintf("reach a private sandbox's %s port (%d) through spaced's port routing with no token, by headers and by Host", p.name, p.port),
				run: func(t *testing.T) error {
					if err := control(t); err != nil {
						return err
					}
					for _, byHost := range []bool{false, true} {
						if err := refused(403)(f.port(f.b.ID, p.port, byHost, nil)); err != nil {
							return fmt.Errorf("by host %v: %w", byHost, err)
						}
					}
					return nil
				}},
			attempt{id: "cp-desktop-" + p.name + "-other-token", family: "cp-desktop-ports", stops: stops, control: ctl,
				desc: fmt.Sprintf("reach sandbox B's %s port (%d) with sandbox A's traffic token, A's access token, or a forged traffic token: each must answer as a random token does", p.name, p.port),
				run: func(t *testing.T) error {
					if err := control(t); err != nil {
						return err
					}
					random := func() (int, []byte, error) {
						return f.port(f.b.ID, p.port, false, map[string]string{"E2b-Traffic-Access-Token": harness.RandHex(20)})
					}
					for name, hdr := range map[string]map[string]string{
						"A's traffic token":             {"E2b-Traffic-Access-Token": trafficToken(f.a.AccessToken)},
						"A's access token":              {"X-Access-Token": f.a.AccessToken},
						"B's traffic token upper-cased": {"E2b-Traffic-Access-Token": strings.ToUpper(trafficToken(f.b.AccessToken))},
						"B's traffic token cut short":   {"E2b-Traffic-Access-Token": trafficToken(f.b.AccessToken)[:39]},
					} {
						if name == "B's traffic token upper-cased" && hdr["E2b-Traffic-Access-Token"] == trafficToken(f.b.AccessToken) {
							continue // all digits: nothing changed
						}
						if err := refused(403)(f.port(f.b.ID, p.port, false, hdr)); err != nil {
							return fmt.Errorf("%s: %w", name, err)
						}
						if err := sameAs(random())(f.port(f.b.ID, p.port, false, hdr)); err != nil {
							return fmt.Errorf("%s: %w", name, err)
						}
					}
					return nil
				}},
			attempt{id: "cp-desktop-" + p.name + "-apikey", family: "cp-desktop-ports", stops: stops, control: ctl,
				desc: fmt.Sprintf("reach a private sandbox's %s port (%d) with an API key instead of its token (Authorization: Bearer, X-API-Key): a key opens the API, not a sandbox's ports", p.name, p.port),
				run: func(t *testing.T) error {
					if err := control(t); err != nil {
						return err
					}
					for _, hdr := range []map[string]string{
						{"Authorization": "Bearer " + f.d.APIKey},
						{"X-API-Key": f.d.APIKey},
					} {
						if err := refused(403)(f.port(f.b.ID, p.port, false, hdr)); err != nil {
							return err
						}
					}
					return nil
				}},
		)
	}
	return out
}
