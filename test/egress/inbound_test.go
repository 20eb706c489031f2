package egress

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spacesandbox/space/client"
)

// TestInbound: a port a sandbox listens on is reachable through spaced's
// <port>-<id> proxy only with that sandbox's access token, unless the
// sandbox was made with public ports.
func TestInbound(t *testing.T) {
	need(t)
	t.Parallel()
	private := newSandbox(t, &client.Network{})
	public := newSandbox(t, &client.Network{PublicPorts: true})
	other := newSandbox(t, nil)
	startServer(t, private.ID)
	startServer(t, public.ID)
	get := func(id, token string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+env.d.Addr+"/", nil)
		req.Host = "8000-" + id + ".localhost"
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name  string
		id    string
		token string
		reach bool
	}{
		{"private port without a token", private.ID, "", false},
		{"private port with a wrong token", private.ID, "0123456789abcdef", false},
		{"private port with another sandbox's token", private.ID, other.AccessToken, false},
		{"private port with its own token", private.ID, private.AccessToken, true},
		{"public port without a token", public.ID, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.id, tc.token)
			if got := code == 200 && strings.Contains(body, "M-SANDBOX-B"); got != tc.reach {
				t.Errorf("%d %q, want reachable=%v", code, body, tc.reach)
			}
		})
	}
}
