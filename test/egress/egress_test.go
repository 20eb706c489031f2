package egress

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// strictPolicy allows one name, one subdomain wildcard and one
// address:port; nothing else.
var strictPolicy = client.Network{Allow: []string{"allowed.test", "*.sfx.test", allowedIP + ":8080"}}

// TestAllowed: what a policy allows works, through the gateway, and a
// runtime policy change applies to the next connection.
func TestAllowed(t *testing.T) {
	need(t)
	t.Parallel()
	sb := newSandbox(t, &strictPolicy)
	for _, tc := range []struct {
		name string
		spec spec
		want string
	}{
		{"DNS for an allowed name", spec{Kind: "dns", Host: "allowed.test"}, "OK " + allowedIP},
		{"DNS for a wildcard subdomain", spec{Kind: "dns", Host: "deep.api.sfx.test"}, "OK " + allowedIP},
		{"HTTP to an allowed name", spec{Kind: "url", URL: "http://allowed.test/"}, "M-" + allowedIP + ":80 host=allowed.test"},
		{"HTTP to an allowed name with odd case and a trailing dot", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: httpGet("ALLOWED.Test.", "/")}, "M-" + allowedIP + ":80 host=ALLOWED.Test."},
		{"HTTPS to an allowed name, verified end to end", spec{Kind: "url", URL: "https://allowed.test/", CA: caPath}, "M-" + allowedIP + ":443 host=allowed.test"},
		{"HTTPS to a wildcard subdomain", spec{Kind: "url", URL: "https://api.sfx.test/", CA: caPath}, "M-" + allowedIP + ":443 host=api.sfx.test"},
		{"TCP to an allowed address:port (server speaks first)", spec{Kind: "tcp", Host: allowedIP, Port: 8080}, "M-" + allowedIP + ":8080 banner"},
		{"HTTP POST with Expect: 100-continue", spec{Kind: "tcp", Host: allowedIP, Port: 80,
			Send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"}, "M-" + allowedIP + ":80 host=allowed.test"},
		{"two requests on one kept-alive connection", spec{Kind: "tcp", Host: allowedIP, Port: 80,
			Send: "GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n" + httpGet("allowed.test", "/2")}, "host=allowed.test auth=- xkey=-\nHTTP/1.1 200 OK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := probe(t, sb.ID, tc.spec); !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want it to contain %q", got, tc.want)
			}
		})
	}

	t.Run("runtime change", func(t *testing.T) {
		url := spec{Kind: "url", URL: "http://allowed.test/"}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.d.Client.SetNetwork(ctx, sb.ID, client.Network{Allow: []string{allowedIP + ":8080"}}); err != nil {
			t.Fatal(err)
		}
		if got := probe(t, sb.ID, url); strings.Contains(got, "M-") {
			t.Errorf("allowed.test still reachable after it was removed: %q", got)
		}
		if got := probe(t, sb.ID, spec{Kind: "tcp", Host: allowedIP, Port: 8080}); !strings.Contains(got, "banner") {
			t.Errorf("the address rule that stayed stopped working: %q", got)
		}
		if err := env.d.Client.SetNetwork(ctx, sb.ID, strictPolicy); err != nil {
			t.Fatal(err)
		}
		if got := probe(t, sb.ID, url); !strings.Contains(got, "host=allowed.test") {
			t.Errorf("allowed.test not reachable after it was allowed again: %q", got)
		}
		got, err := env.d.Client.GetSandbox(ctx, sb.ID)
		if err != nil || got.Network == nil || len(got.Network.Allow) != 3 || got.Network.Internet {
			t.Errorf("reported network %+v (%v)", got.Network, err)
		}
	})

	t.Run("no policy is no egress", func(t *testing.T) {
		none := newSandbox(t, nil)
		if got := probe(t, none.ID, spec{Kind: "tcp", Host: allowedIP, Port: 8080}); strings.Contains(got, "M-") {
			t.Errorf("a sandbox without a policy reached %s: %q", allowedIP, got)
		}
		if got := probe(t, none.ID, spec{Kind: "dns", Host: "allowed.test"}); strings.HasPrefix(got, "OK") {
			t.Errorf("a sandbox without a policy resolved a name: %q", got)
		}
	})
}

// TestBadPolicy: a policy that does not parse is a 400 with the API's
// error shape, and changes nothing.
func TestBadPolicy(t *testing.T) {
	need(t)
	t.Parallel()
	for _, body := range []string{
		`{"network":{"allow":["bad..name"]}}`,
		`{"network":{"allow":["example.com:0"]}}`,
		`{"network":{"deny":["10.0.0.0/33"]}}`,
		`{"network":{"allow":["127.1"]}}`,
		`{"network":{"allow":["a%2eb"]}}`,
		`{"network":{"allow":["ok.example"],"internet":"yes"}}`,
		`{"network":{"allowed":["ok.example"]}}`,
	} {
		resp, data := api(t, "POST", "/v1/sandboxes", body)
		checkError(t, body, resp, data)
	}
	sb := newSandbox(t, &strictPolicy)
	resp, data := api(t, "PUT", "/v1/sandboxes/"+sb.ID+"/network", `{"allow":["*.*.example"]}`)
	checkError(t, "PUT", resp, data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := env.d.Client.GetSandbox(ctx, sb.ID)
	if err != nil || got.Network == nil || len(got.Network.Allow) != 3 {
		t.Errorf("a refused PUT changed the policy: %+v (%v)", got.Network, err)
	}
}

func api(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+env.d.Addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+env.d.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

func checkError(t *testing.T, what string, resp *http.Response, data []byte) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode != 400 || json.Unmarshal(data, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Errorf("%s: %d %s, want 400 with an error code and message", what, resp.StatusCode, data)
	}
}
