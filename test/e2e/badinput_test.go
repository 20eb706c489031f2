package e2e

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestBadInput: requests that cannot be served get the right status and a
// JSON error, and create nothing. What the API refuses before it asks the
// sandbox service (malformed JSON, negative values, bad paths, pids and
// query values) is checked without a daemon by internal/httpapi's
// TestBadInput; here is what needs the service's own checks or a sandbox.
func TestBadInput(t *testing.T) {
	d := need(t)
	t.Parallel()
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
		msgHas             string
	}{
		{"unknown sandbox", "GET", "/v1/sandboxes/doesnotexist123", nil, 404, "not_found", ""},
		{"unknown sandbox kill", "DELETE", "/v1/sandboxes/doesnotexist123", nil, 404, "not_found", ""},
		{"unknown sandbox command", "POST", "/v1/sandboxes/doesnotexist123/commands", `{"cmd":"true"}`, 404, "not_found", ""},
		{"unknown sandbox files", "GET", "/v1/sandboxes/doesnotexist123/files?path=/etc/hostname", nil, 404, "not_found", ""},
		{"unknown route", "GET", "/v1/nothing", nil, 404, "not_found", ""},
		{"too much memory", "POST", "/v1/sandboxes", `{"memory_mb":65537}`, 400, "invalid_argument", "memory_mb"},
		{"too little memory", "POST", "/v1/sandboxes", `{"memory_mb":63}`, 400, "invalid_argument", "memory_mb"},
		{"too many cpus", "POST", "/v1/sandboxes", `{"cpu":65}`, 400, "invalid_argument", "cpu"},
		{"too much disk", "POST", "/v1/sandboxes", `{"disk_mb":1048577}`, 400, "invalid_argument", "disk_mb"},
		{"too few processes", "POST", "/v1/sandboxes", `{"max_processes":15}`, 400, "invalid_argument", "max_processes"},
		{"too long timeout", "POST", "/v1/sandboxes", `{"timeout_seconds":86401}`, 400, "invalid_argument", ""},
		{"bad template name", "POST", "/v1/sandboxes", `{"template":"../base"}`, 400, "invalid_argument", ""},
		{"bad env name", "POST", "/v1/sandboxes", `{"env":{"A=B":"c"}}`, 400, "invalid_argument", ""},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"nope"}`, 404, "not_found", "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, d, tc.method, tc.path, tc.body, nil)
			e := wantError(t, resp, body, tc.status, tc.code)
			if tc.msgHas != "" && !strings.Contains(e.Error.Message, tc.msgHas) {
				t.Errorf("message %q does not mention %q", e.Error.Message, tc.msgHas)
			}
		})
	}

	t.Run("auth", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			hdr    map[string]string
			status int
		}{
			{"no key", map[string]string{"Authorization": ""}, 401},
			{"wrong bearer", map[string]string{"Authorization": "Bearer nope"}, 401},
			{"wrong X-API-Key", map[string]string{"Authorization": "", "X-API-Key": "nope"}, 401},
			{"basic auth", map[string]string{"Authorization": "Basic " + d.APIKey}, 401},
			{"key with a suffix", map[string]string{"Authorization": "Bearer " + d.APIKey + "x"}, 401},
			{"right bearer", nil, 200},
			{"right X-API-Key", map[string]string{"Authorization": "", "X-API-Key": d.APIKey}, 200},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := do(t, d, "GET", "/v1/sandboxes", nil, tc.hdr)
				if tc.status == 401 {
					wantError(t, resp, body, 401, "unauthenticated")
				} else if resp.StatusCode != tc.status {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			})
		}
		// Health is public; the metrics (every tenant's usage) need the
		// admin key.
		if resp, body := do(t, d, "GET", "/healthz", nil, map[string]string{"Authorization": ""}); resp.StatusCode != 200 {
			t.Errorf("/healthz without a key: %d %s", resp.StatusCode, body)
		}
		resp, body := do(t, d, "GET", "/metrics", nil, map[string]string{"Authorization": ""})
		wantError(t, resp, body, 401, "unauthenticated")
		if resp, body := do(t, d, "GET", "/metrics", nil, nil); resp.StatusCode != 200 || !strings.Contains(string(body), "space_sandboxes_running") {
			t.Errorf("/metrics with the admin key: %d %.200s", resp.StatusCode, body)
		}
	})

	t.Run("files", func(t *testing.T) {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{})
		files := "/v1/sandboxes/" + sb.ID + "/files"
		resp, body := do(t, d, "GET", files+"?path=/home/user/missing", nil, nil)
		wantError(t, resp, body, 404, "not_found")
		resp, body = do(t, d, "GET", files+"/stat?path=/nope/nope", nil, nil)
		wantError(t, resp, body, 404, "not_found")
		resp, body = do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/commands/999999/signal", `{"signal":"SIGTERM"}`, nil)
		wantError(t, resp, body, 404, "not_found")

		// A symlink made inside the sandbox is resolved inside it.
		shAs(t, d, sb.ID, "root", "ln -s /etc/shadow /home/user/s")
		inside := shAs(t, d, sb.ID, "root", "cat /etc/shadow")
		host, _ := os.ReadFile("/etc/shadow")
		if inside == string(host) {
			t.Fatal("the sandbox's /etc/shadow equals the host's: cannot tell them apart")
		}
		got := download(t, d, sb.ID, "/home/user/s")
		switch {
		case got.status == 200 && got.body == string(host):
			t.Fatalf("the files API followed a sandbox symlink to the HOST's /etc/shadow")
		case got.status == 200 && got.body != inside:
			t.Errorf("download via symlink gave %q, want the sandbox's /etc/shadow %q", harness.Clip(got.body), harness.Clip(inside))
		case got.status == 200:
		case got.status == 403:
			t.Logf("download via symlink refused (403): the files API runs as the user, who may not read /etc/shadow")
		default:
			t.Errorf("download via symlink: %d %s", got.status, got.body)
		}

		for _, p := range []string{"../../../../etc/hostname", "/../../../../etc/hostname", "/home/user/../../../etc/hostname", "%2e%2e/%2e%2e/etc/hostname"} {
			got := download(t, d, sb.ID, p)
			hostName, _ := os.ReadFile("/etc/hostname")
			if got.status == 200 && got.body != "sandbox\n" {
				t.Errorf("download %q: %q, want the sandbox's hostname (host's is %q)", p, got.body, hostName)
			}
			if got.status != 200 && got.status != 404 && got.status != 400 {
				t.Errorf("download %q: %d %s", p, got.status, got.body)
			}
		}
		if got := download(t, d, sb.ID, "../../../../etc/hostname"); got.status != 200 {
			t.Errorf("../../../../etc/hostname relative to the home dir should read the sandbox's /etc/hostname: %d %s", got.status, got.body)
		}
	})
}

type downloaded struct {
	status int
	body   string
}

func download(t *testing.T, d *harness.Daemon, id, path string) downloaded {
	t.Helper()
	req, _ := http.NewRequestWithContext(harness.Ctx(t, 30*time.Second), "GET",
		"http://"+d.Addr+"/v1/sandboxes/"+id+"/files?path="+url.QueryEscape(path), nil)
	req.Header.Set("X-API-Key", d.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return downloaded{resp.StatusCode, string(b)}
}
