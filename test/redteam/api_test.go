package redteam

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// cpFixture is what control-plane attempts work on: a, the attacker's own
// sandbox (its access token is known), and b, the victim (the shared
// neighbour, whose token is not).
type cpFixture struct {
	d       *harness.Daemon
	a, b    *client.Sandbox
	killed  string // id of a sandbox that was killed
	bootTok string // a's boot token, read from its OCI spec on the host
}

// noRedirect is a client that reports redirects instead of following them.
var noRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// req sends one request; hdr values of "" delete a header. The API key is
// sent unless Authorization is deleted or replaced.
func (f *cpFixture) req(method, path string, body []byte, hdr map[string]string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequestWithContext(ctx, method, "http://"+f.d.Addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	r.Header.Set("Authorization", "Bearer "+f.d.APIKey)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			r.Host = v
		case v == "":
			r.Header.Del(k)
		default:
			r.Header.Set(k, v)
		}
	}
	resp, err := noRedirect.Do(r)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, nil, nil // a stream that may never end
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// envd sends a request to sandbox id's agent through spaced's E2B proxy
// with token (none if ""), and no API key.
func (f *cpFixture) envd(id, token, method, path string, body []byte, hdr map[string]string) (int, []byte, error) {
	h := map[string]string{"Authorization": "", "E2b-Sandbox-Id": id}
	if token != "" {
		h["X-Access-Token"] = token
	}
	for k, v := range hdr {
		h[k] = v
	}
	return f.req(method, path, body, h)
}

// refused returns a check that status is one of want (the request was
// turned away).
func refused(want ...int) func(int, []byte, error) error {
	return func(status int, body []byte, err error) error {
		if err != nil {
			return err
		}
		if !slices.Contains(want, status) {
			return fmt.Errorf("status %d, want one of %v; body %.300s", status, want, body)
		}
		return nil
	}
}

// denied: a 4xx answer.
func denied(status int, body []byte, err error) error {
	if err != nil {
		return err
	}
	if status < 400 || status >= 500 {
		return fmt.Errorf("status %d, want a 4xx refusal; body %.300s", status, body)
	}
	return nil
}

// ok200: the request was answered 200.
func ok200(status int, body []byte, err error) error {
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("status %d, want 200; body %.300s", status, body)
	}
	return nil
}

// letThrough: the request got past authentication: neither a refusal nor
// a proxy or server error (501, a handler's "not implemented", counts as
// past it).
func letThrough(status int, body []byte, err error) error {
	if err != nil {
		return err
	}
	if status == 401 || status == 403 || (status >= 500 && status != 501) {
		return fmt.Errorf("status %d; body %.300s", status, body)
	}
	return nil
}

// handled: a route's handler answered, past authentication: not 401, not
// a server error, and not the router's "no route".
func handled(status int, body []byte, err error) error {
	if err := letThrough(status, body, err); err != nil {
		return err
	}
	if bytes.Contains(body, []byte("no route for")) {
		return fmt.Errorf("status %d: %.300s", status, body)
	}
	return nil
}

func bodyOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// signedContent is what /home/user/signed.txt holds in the attacker's
// sandbox, for the signed URL attempts' controls.
const signedContent = "signed-url-control"

// envdRoutes are the agent's routes an E2B client uses, with a body that
// would do harm to the victim if it were let through.
//
// ctl, if set, is the body of the control (the attacker's own token on its
// own sandbox) where body would harm the attacker's own agent.
var envdRoutes = []struct{ name, method, path, body, ctl string }{
	{"envs", "GET", "/envs", "", ""},
	{"metrics", "GET", "/metrics", "", ""},
	{"fs-stat", "POST", "/filesystem.Filesystem/Stat", `{"path":"` + neighbourMarkerPath + `"}`, ""},
	{"fs-listdir", "POST", "/filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":1}`, ""},
	{"fs-remove", "POST", "/filesystem.Filesystem/Remove", `{"path":"` + neighbourMarkerPath + `"}`, ""},
	{"fs-move", "POST", "/filesystem.Filesystem/Move", `{"source":"` + neighbourMarkerPath + `","destination":"/tmp/stolen"}`, ""},
	{"fs-watcher", "POST", "/filesystem.Filesystem/CreateWatcher", `{"path":"/home/user"}`, ""},
	{"proc-list", "POST", "/process.Process/List", `{}`, ""},
	{"proc-signal", "POST", "/process.Process/SendSignal", `{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}`, `{"process":{"pid":999999},"signal":"SIGNAL_SIGKILL"}`},
	{"files-get", "GET", "/files?path=" + neighbourMarkerPath, "", ""},
	{"files-post", "POST", "/files?path=" + neighbourMarkerPath, "overwritten", ""},
	{"files-compose", "POST", "/files/compose", `{"source_paths":["` + neighbourMarkerPath + `"],"destination":"/tmp/x"}`, ""},
}

// signature is envd's /files URL signature (as the SDKs compute it).
func signature(path, op, user, token, exp string) string {
	parts := []string{path, op, user, token}
	if exp != "" {
		parts = append(parts, exp)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func tokenAttempts(f *cpFixture) []attempt {
	const stops = "e2bcompat proxy: X-Access-Token must equal the target sandbox's token (constant-time); the agent checks it again"
	var out []attempt
	for _, r := range envdRoutes {
		out = append(out, attempt{id: "cp-cross-token-" + r.name, category: "control-plane", family: "cp-cross-token", stops: stops,
			desc:    "sandbox A's access token on sandbox B's envd " + r.method + " " + strings.Split(r.path, "?")[0] + " through the E2B proxy",
			control: "A's token on A's own route is let through to the agent",
			run: func(t *testing.T) error {
				body, ctl := bodyOf(r.body), bodyOf(r.body)
				if r.ctl != "" {
					ctl = bodyOf(r.ctl)
				}
				if err := letThrough(f.envd(f.a.ID, f.a.AccessToken, r.method, r.path, ctl, nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				st, b, err := f.envd(f.b.ID, f.a.AccessToken, r.method, r.path, body, nil)
				return refused(401)(st, b, err)
			}})
	}
	forged := []struct{ name, desc string }{
		{"random", "a random 64-hex token"},
		{"upper", "the right token upper-cased"},
		{"prefix", "the right token without its last character"},
		{"suffix", "the right token with a character appended"},
		{"split", "the right token with a space in the middle"},
		{"empty", "an empty X-Access-Token header"},
	}
	for _, v := range forged {
		out = append(out, attempt{id: "cp-forged-token-" + v.name, category: "control-plane", family: "cp-forged-token", stops: stops,
			desc:    "a forged access token on envd /process.Process/List: " + v.desc,
			control: "B's own token on the same route answers 200",
			run: func(t *testing.T) error {
				if err := ok200(f.envd(f.b.ID, f.b.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				tok := f.b.AccessToken
				switch v.name {
				case "random":
					tok = harness.RandHex(32)
				case "upper":
					tok = strings.ToUpper(tok)
				case "prefix":
					tok = tok[:len(tok)-1]
				case "suffix":
					tok += "0"
				case "split":
					tok = tok[:10] + " " + tok[10:]
				case "empty":
					st, b, err := f.envd(f.b.ID, "", "POST", "/process.Process/List", []byte("{}"), map[string]string{"X-Access-Token": " "})
					return refused(401)(st, b, err)
				}
				if tok == f.b.AccessToken {
					return nil // upper-casing changed nothing (all digits)
				}
				st, b, err := f.envd(f.b.ID, tok, "POST", "/process.Process/List", []byte("{}"), nil)
				return refused(401)(st, b, err)
			}})
	}
	out = append(out,
		attempt{id: "cp-token-other-headers", category: "control-plane", stops: stops,
			desc:    "the victim's token where the proxy does not look: Authorization: Bearer, ?access_token=, E2b-Traffic-Access-Token",
			control: "the same token in X-Access-Token answers 200",
			run: func(t *testing.T) error {
				if err := ok200(f.envd(f.b.ID, f.b.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				for _, h := range []map[string]string{
					{"Authorization": "Bearer " + f.b.AccessToken},
					{"E2b-Traffic-Access-Token": f.b.AccessToken},
				} {
					if err := denied(f.envd(f.b.ID, "", "POST", "/process.Process/List", []byte("{}"), h)); err != nil {
						return err
					}
				}
				return denied(f.envd(f.b.ID, "", "POST", "/process.Process/List?access_token="+f.b.AccessToken, []byte("{}"), nil))
			}},
		attempt{id: "cp-token-replay-killed", category: "control-plane", stops: "a killed sandbox's record is gone from the proxy's lookup; tokens are per sandbox and never reused; connections are pooled per sandbox id, not per address",
			desc:    "replay the token of a killed sandbox against its id and against a new sandbox that may have its address",
			control: "the token opened its sandbox before the kill",
			run: func(t *testing.T) error {
				d := f.d
				c, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
				if err != nil {
					return err
				}
				if err := ok200(f.envd(c.ID, c.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				if err := d.Client.KillSandbox(harness.Ctx(t, time.Minute), c.ID); err != nil {
					return err
				}
				n := d.NewSandbox(t, client.CreateSandboxRequest{})
				if err := refused(502, 503, 404)(f.envd(c.ID, c.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("old id: %w", err)
				}
				return refused(401)(f.envd(n.ID, c.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil))
			}},
		attempt{id: "cp-boot-token", category: "control-plane", stops: "the agent is not dumpable (its environ is closed to root without CAP_SYS_PTRACE); boot's Init replaced the boot token, and the agent accepts only the current one",
			desc:    "as root, read the boot token from the agent's /proc/1/environ; then use it (taken from the host) through the proxy and directly at 127.0.0.1:49983",
			control: "inside, the sandbox's own access token answers 200 at 127.0.0.1:49983",
			run: func(t *testing.T) error {
				if f.bootTok == "" {
					return fmt.Errorf("no boot token in the sandbox's OCI spec (the attempt could not run)")
				}
				r := run(t, f.d, f.a.ID, client.CommandRequest{Cmd: "cat /proc/1/environ", User: "root"})
				if r.Exit.Code() == 0 || strings.Contains(r.Stdout, f.bootTok) {
					return fmt.Errorf("root inside read the agent's environment: %q", r.Stdout)
				}
				if err := denied(f.envd(f.a.ID, f.bootTok, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("through the proxy: %w", err)
				}
				curl := func(tok string) string {
					return sh(t, f.d, f.a.ID, "root", `curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -H "X-Access-Token: `+tok+`" -d '{}' http://127.0.0.1:49983/process.Process/List`)
				}
				if out := curl(f.a.AccessToken); out != "200" {
					return fmt.Errorf("control: inside, the sandbox's own token gave %s", out)
				}
				if out := curl(f.bootTok); out != "401" {
					return fmt.Errorf("inside, the boot token gave %s", out)
				}
				return nil
			}},
		attempt{id: "cp-native-agent-service", category: "control-plane", stops: "e2bcompat proxy: /spaceagent.v1.Agent/ is spaced's own channel, refused whatever the token",
			desc:    "call the agent's native Init (re-key the agent) through the E2B proxy with the sandbox's own valid token",
			control: "the same token on /process.Process/List answers 200",
			run: func(t *testing.T) error {
				if err := ok200(f.envd(f.a.ID, f.a.AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return refused(404)(f.envd(f.a.ID, f.a.AccessToken, "POST", "/spaceagent.v1.Agent/Init", []byte(`{"access_token":"mine"}`), nil))
			}},
		attempt{id: "cp-host-route-cross-token", category: "control-plane", stops: stops,
			desc:    "route by Host: 49983-<B>.example.com carrying A's token",
			control: "Host 49983-<A>.example.com with A's token answers 200",
			run: func(t *testing.T) error {
				if err := ok200(f.req("POST", "/process.Process/List", []byte("{}"), map[string]string{"Authorization": "", "Host": "49983-" + f.a.ID + ".example.com", "X-Access-Token": f.a.AccessToken})); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return refused(401)(f.req("POST", "/process.Process/List", []byte("{}"), map[string]string{"Authorization": "", "Host": "49983-" + f.b.ID + ".example.com", "X-Access-Token": f.a.AccessToken}))
			}},
		attempt{id: "cp-port-spelling", category: "control-plane", stops: "e2bcompat: the port is parsed as a number, so every spelling of 49983 is the envd port and needs the token",
			desc:    "reach B's envd without a token by spelling its port differently (049983, +49983, ' 49983', in the Host label and in E2b-Sandbox-Port)",
			control: "E2b-Sandbox-Port 49983 with B's token answers 200",
			run: func(t *testing.T) error {
				if err := ok200(f.envd(f.b.ID, f.b.AccessToken, "POST", "/process.Process/List", []byte("{}"), map[string]string{"E2b-Sandbox-Port": "49983"})); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				for _, p := range []string{"049983", "+49983", " 49983", "49983 "} {
					if err := refused(401, 400)(f.envd(f.b.ID, "", "POST", "/process.Process/List", []byte("{}"), map[string]string{"E2b-Sandbox-Port": p})); err != nil {
						return fmt.Errorf("port %q: %w", p, err)
					}
				}
				return refused(401, 400, 404)(f.req("POST", "/process.Process/List", []byte("{}"), map[string]string{"Authorization": "", "Host": "049983-" + f.b.ID + ".example.com"}))
			}},
		attempt{id: "cp-pooled-sandbox", category: "control-plane", stops: "sandbox.Service: a pooled sandbox is nobody's: no API route or proxy request reaches it until it is claimed",
			desc:    "reach a pooled (unclaimed) sandbox, whose id an attacker learned, through the native API with the key and through the proxy without a token",
			control: "the same command route answers 200 for a claimed sandbox",
			run: func(t *testing.T) error {
				if err := ok200(f.req("GET", "/v1/sandboxes/"+f.a.ID, nil, nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				var id string
				if !harness.WaitFor(20*time.Second, func() bool { id = pooledID(t, f.d); return id != "" }) {
					return fmt.Errorf("no pooled sandbox appeared (the attempt could not run)")
				}
				err := refused(404)(f.req("POST", "/v1/sandboxes/"+id+"/commands", []byte(`{"cmd":"id"}`), nil))
				if err == nil {
					err = refused(401, 502, 503)(f.envd(id, "", "POST", "/process.Process/List", []byte("{}"), nil))
				}
				if err != nil && listedNow(t, f.d, id) {
					t.Logf("pooled sandbox %s was claimed by another test meanwhile: %v", id, err)
					return nil
				}
				return err
			}},
	)
	// Signed /files URLs.
	exp := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	signed := []struct{ name, desc string }{
		{"write-with-read", "a read signature used to write"},
		{"other-path", "a signature for one path used for another"},
		{"other-user", "a signature for user used as root"},
		{"expired", "a signature that expired a minute ago"},
		{"cross-sandbox", "A's signature sent to B by E2b-Sandbox-Id"},
		{"forged", "a signature made with a guessed token"},
	}
	for _, v := range signed {
		out = append(out, attempt{id: "cp-signed-url-" + v.name, category: "control-plane", family: "cp-signed-url", stops: "envd URL signatures: sha256 over path, operation, user, expiry and the sandbox's token; checked by the proxy's lookup and again by the agent",
			desc:    "a signed /files URL abused: " + v.desc,
			control: "the same URL, untampered, works (the read returns the file, the write succeeds)",
			run: func(t *testing.T) error {
				p := "/home/user/signed.txt"
				q := func(path, op, user, tok, e string) string {
					v := url.Values{"path": {path}, "username": {user}, "signature": {signature(path, op, user, tok, e)}}
					if e != "" {
						v.Set("signature_expiration", e)
					}
					return "/files?" + v.Encode()
				}
				hdr := map[string]string{"Authorization": ""}
				st, b, err := f.req("GET", q(p, "read", "user", f.a.AccessToken, exp), nil, hdr)
				if err != nil || st != 200 || string(b) != signedContent {
					return fmt.Errorf("control: the untampered read URL gave %d %.200q (%v)", st, b, err)
				}
				if v.name == "write-with-read" {
					body, ct := multipartBody("written")
					if err := ok200(f.req("POST", q(p, "write", "user", f.a.AccessToken, exp), body, map[string]string{"Authorization": "", "Content-Type": ct})); err != nil {
						return fmt.Errorf("control: the untampered write URL: %w", err)
					}
					f.d.Client.Upload(harness.Ctx(t, 10*time.Second), f.a.ID, p, strings.NewReader(signedContent))
				}
				switch v.name {
				case "write-with-read":
					body, ct := multipartBody("x")
					return denied(f.req("POST", q(p, "read", "user", f.a.AccessToken, exp), body, map[string]string{"Authorization": "", "Content-Type": ct}))
				case "other-path":
					u := strings.Replace(q(p, "read", "user", f.a.AccessToken, exp), "signed.txt", "other.txt", 1)
					return denied(f.req("GET", u, nil, hdr))
				case "other-user":
					u := strings.Replace(q(p, "read", "user", f.a.AccessToken, exp), "username=user", "username=root", 1)
					return denied(f.req("GET", u, nil, hdr))
				case "expired":
					old := fmt.Sprint(time.Now().Add(-time.Minute).Unix())
					return denied(f.req("GET", q(p, "read", "user", f.a.AccessToken, old), nil, hdr))
				case "cross-sandbox":
					return denied(f.envd(f.b.ID, "", "GET", q(neighbourMarkerPath, "read", "user", f.a.AccessToken, exp), nil, nil))
				default:
					return denied(f.req("GET", q(neighbourMarkerPath, "read", "user", harness.RandHex(32), exp), nil, hdr))
				}
			}})
	}
	return out
}

// specRoute is one operation of api/openapi.yaml.
type specRoute struct {
	method, path, op string
	public           bool
}

func specRoutes(t testing.TB) []specRoute {
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var out []specRoute
	for p, ops := range spec.Paths {
		for m, n := range ops {
			if m == "parameters" {
				continue
			}
			var op struct {
				OperationID string            `yaml:"operationId"`
				Security    *[]map[string]any `yaml:"security"`
			}
			if err := n.Decode(&op); err != nil {
				t.Fatal(err)
			}
			out = append(out, specRoute{strings.ToUpper(m), p, op.OperationID, op.Security != nil && len(*op.Security) == 0})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].op < out[j].op })
	return out
}

func (r specRoute) url(id string) string {
	u := strings.NewReplacer("{id}", id, "{pid}", "1").Replace(r.path)
	if strings.Contains(r.path, "/files") && !strings.HasSuffix(r.path, "mkdir") && !strings.HasSuffix(r.path, "move") {
		u += "?path=/home/user"
	}
	return u
}

func (r specRoute) body() []byte {
	if r.method == "POST" || r.method == "PUT" {
		return []byte(`{}`)
	}
	return nil
}

// e2bRoute is one E2B control-plane route of api/e2b-routes.txt.
type e2bRoute struct {
	pattern string // "POST /sandboxes/{id}/pause"
	public  bool   // it checks its caller itself, not by API key
}

// e2bAPIRoutes reads api/e2b-routes.txt, the router's own table
// (internal/e2bcompat keeps the file current): a route added to the router
// is attacked here without anyone adding it.
func e2bAPIRoutes(t testing.TB) []e2bRoute {
	b, err := os.ReadFile(filepath.Join("..", "..", "api", "e2b-routes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []e2bRoute
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, public := strings.CutSuffix(line, " public")
		out = append(out, e2bRoute{pattern, public})
	}
	if len(out) < 30 {
		t.Fatalf("api/e2b-routes.txt lists %d routes: not the router's table", len(out))
	}
	return out
}

// e2bKeyRoutes are the E2B routes that take the API key.
func e2bKeyRoutes(t testing.TB) []string {
	var out []string
	for _, r := range e2bAPIRoutes(t) {
		if !r.public {
			out = append(out, r.pattern)
		}
	}
	return out
}

func keyAttempts(t testing.TB, f *cpFixture) []attempt {
	var out []attempt
	badKeys := func(key string) []map[string]string {
		return []map[string]string{
			{"Authorization": ""},
			{"Authorization": "Bearer " + harness.RandHex(16)},
			{"Authorization": "Bearer "},
			{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(key+":"))},
			{"Authorization": "Bearer " + key[:len(key)-1]},
			{"Authorization": "", "X-API-Key": "rt_" + harness.RandHex(16)},
			{"Authorization": "", "X-API-Key": key + "x"},
		}
	}
	for _, r := range specRoutes(t) {
		if r.public {
			continue
		}
		out = append(out, attempt{id: "cp-nokey-" + r.op, category: "control-plane", family: "cp-nokey", stops: "httpapi.authenticate: constant-time API key check before any handler",
			desc:    "call " + r.method + " " + r.path + " without the API key, with a wrong one, a truncated one, Basic auth, or the key in the query",
			control: "with the key, the route's handler answers (not 401, not \"no route\"): the killed sandbox's id and a body with an unknown field keep it harmless",
			run: func(t *testing.T) error {
				ctl := r.body()
				if ctl != nil {
					ctl = []byte(`{"rt_unknown_field":1}`)
				}
				if err := handled(f.req(r.method, r.url(f.killed), ctl, nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				for _, h := range badKeys(f.d.APIKey) {
					st, b, err := f.req(r.method, r.url(f.a.ID), r.body(), h)
					if err := refused(401)(st, b, err); err != nil {
						return fmt.Errorf("headers %v: %w", h, err)
					}
				}
				u := r.url(f.a.ID)
				sep := "?"
				if strings.Contains(u, "?") {
					sep = "&"
				}
				return refused(401)(f.req(r.method, u+sep+"api_key="+f.d.APIKey+"&key="+f.d.APIKey, r.body(), map[string]string{"Authorization": ""}))
			}})
		if !strings.Contains(strings.ReplaceAll(r.path, "{pid}", ""), "{") {
			continue
		}
		ctlText := ""
		if r.method == "GET" {
			ctlText = "the same read for the attacker's own id is answered by the route's handler (not 401, 5xx or \"no route\")"
		}
		out = append(out, attempt{id: "cp-badid-" + r.op, category: "control-plane", family: "cp-badid", stops: "sandbox.Service: ids are looked up in the store, never used as paths; unknown and killed ids are not found, and an ended sandbox refuses changes",
			desc:    "call " + r.method + " " + r.path + " with a killed sandbox's id (reads of its records are allowed) and ids shaped as paths, wildcards and 300 characters in every path parameter",
			control: ctlText,
			run: func(t *testing.T) error {
				if r.method == "GET" {
					if err := handled(f.req(r.method, r.url(f.a.ID), nil, nil)); err != nil {
						return fmt.Errorf("control: %w", err)
					}
				}
				ids := []string{f.killed, "..", "..%2F..%2Fetc", "%2e%2e", "*", "%00", strings.Repeat("a", 300), f.a.ID + "%2F..%2F" + f.b.ID, "..%2F..%2F..%2F..%2Ftmp"}
				for _, id := range ids {
					u := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllStringFunc(r.url(id), func(p string) string { return id })
					st, b, err := f.req(r.method, u, r.body(), nil)
					if err != nil {
						return err
					}
					// A read may answer an empty result for an id it does not
					// know; it must not answer anyone else's data.
					if r.method == "GET" && st == 200 && !bytes.Contains(b, []byte(f.a.ID)) && !bytes.Contains(b, []byte(f.b.ID)) && noLeak(string(b), env.canary.contents()) == nil {
						continue
					}
					if id == f.killed && st == 409 {
						continue
					}
					if err := refused(400, 404, 405, 301, 307, 308)(st, b, err); err != nil {
						return fmt.Errorf("id %q: %w", id, err)
					}
				}
				return nil
			}})
	}
	for _, rt := range e2bKeyRoutes(t) {
		m, p, _ := strings.Cut(rt, " ")
		name := e2bRouteName(p)
		// The sandbox's id in {id}, a harmless value in any other.
		p = strings.ReplaceAll(p, "{id}", "{ID}")
		p = pathParam.ReplaceAllString(p, "x")
		out = append(out, attempt{id: "cp-e2b-nokey-" + strings.ToLower(m) + "-" + name, category: "control-plane", family: "cp-e2b-nokey", stops: "e2bcompat.authenticate: constant-time API key check",
			desc:    "call the E2B control-plane route " + rt + " without the API key or with a wrong one",
			control: "with the key in X-API-Key, the route's handler answers (not 401): the killed sandbox's id and a malformed body keep it harmless",
			run: func(t *testing.T) error {
				u := strings.ReplaceAll(p, "{ID}", f.a.ID)
				var body []byte
				if m != "GET" && m != "DELETE" {
					body = []byte(`{"templateID":"base","timeout":60}`)
				}
				var ctl []byte
				if body != nil {
					ctl = []byte(`{`)
				}
				if err := handled(f.req(m, strings.ReplaceAll(p, "{ID}", f.killed), ctl, map[string]string{"Authorization": "", "X-API-Key": f.d.APIKey})); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				for _, h := range badKeys(f.d.APIKey) {
					if err := denied(f.req(m, u, body, h)); err != nil {
						return fmt.Errorf("headers %v: %w", h, err)
					}
				}
				return nil
			}})
	}
	return out
}

// pooledID finds a sandbox spaced booted for its pool and has not handed
// out: a directory under sandboxes/ that no listing shows.
func pooledID(t *testing.T, d *harness.Daemon) string {
	listed := map[string]bool{}
	all, _ := d.Client.ListAllSandboxes(harness.Ctx(t, 10*time.Second), client.ListOptions{States: []string{"creating", "running", "killed", "lost"}})
	for _, s := range all {
		listed[s.ID] = true
	}
	dirs, _ := os.ReadDir(filepath.Join(d.DataDir, "sandboxes"))
	for _, e := range dirs {
		if !listed[e.Name()] {
			return e.Name()
		}
	}
	return ""
}

// listedNow: id has been claimed since (another test's create took it).
func listedNow(t *testing.T, d *harness.Daemon, id string) bool {
	_, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), id)
	return err == nil
}

// newCPFixture makes the attacker's sandbox and finds a killed and a pooled id.
func newCPFixture(t *testing.T, d *harness.Daemon) *cpFixture {
	f := &cpFixture{d: d, b: getNeighbour(t, d).sb}
	f.a = d.NewSandbox(t, client.CreateSandboxRequest{Metadata: map[string]string{"role": "attacker"}})
	k, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Client.KillSandbox(harness.Ctx(t, time.Minute), k.ID); err != nil {
		t.Fatal(err)
	}
	f.killed = k.ID
	// The agent is not dumpable, so even root inside cannot read the boot
	// token from /proc/1/environ (cp-boot-token checks that); the test
	// reads it where spaced wrote it, the sandbox's OCI spec on the host.
	f.bootTok = d.BootToken(t, f.a.ID)
	if _, err := d.Client.Upload(harness.Ctx(t, 30*time.Second), f.a.ID, "/home/user/signed.txt", strings.NewReader(signedContent)); err != nil {
		t.Fatal(err)
	}
	sh(t, d, f.a.ID, "root", "chown user /home/user/signed.txt")
	return f
}

func TestControlPlane(t *testing.T) {
	d := need(t)
	t.Parallel()
	f := newCPFixture(t, d)
	attempts := append(tokenAttempts(f), keyAttempts(t, f)...)
	attempts = append(attempts, desktopPortAttempts(f)...)
	for _, a := range attempts {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
			}
		})
	}
	// Nothing above may have harmed either sandbox.
	if got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), f.a.ID); err != nil || got.State != client.StateRunning {
		t.Errorf("the attacker's own sandbox is %+v (%v) after the unauthenticated calls", got, err)
	}
	guard(t, d)
}
