package e2bcompat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/spacesandbox/space/internal/accesstoken"

	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

func envd(id, token string) map[string]string {
	h := map[string]string{headerSandboxID: id, headerSandboxPort: "49983"}
	if token != "" {
		h[headerAccessToken] = token
	}
	return h
}

func TestProxyTokens(t *testing.T) {
	h := newHarness(t)
	a, b := h.create(nil), h.create(nil)
	tokA, tokB := h.fake.token(a.SandboxID), h.fake.token(b.SandboxID)

	resp := h.do("POST", "/process.Process/List?x=1", `{}`, envd(a.SandboxID, tokA))
	var s seen
	decode(t, resp, &s)
	if s.Path != "/process.Process/List" || s.Query != "x=1" || s.Token != tokA || s.SandboxID != "" || s.Port != "" ||
		s.Host != "10.0.0.1:49983" || h.lastDial() != "10.0.0.1:49983" {
		t.Fatalf("forwarded as %+v via %s", s, h.lastDial())
	}

	// Refused before reaching any sandbox: no token, a wrong one, the other
	// sandbox's. Connect clients get a Connect error.
	for _, tok := range []string{"", "wrong", tokB} {
		resp := h.do("POST", "/process.Process/List", `{}`, map[string]string{
			headerSandboxID: a.SandboxID, headerAccessToken: tok, "Content-Type": "application/json"})
		if resp.StatusCode != 401 {
			t.Fatalf("token %q: %d", tok, resp.StatusCode)
		}
		var ce struct{ Code, Message string }
		decode(t, resp, &ce)
		if ce.Code != "unauthenticated" {
			t.Fatalf("token %q: %+v", tok, ce)
		}
		wantError(t, h.do("GET", "/files?path=/etc/passwd", nil, envd(a.SandboxID, tok+"x")), 401)
	}
	wantError(t, h.do("GET", "/envs", nil, envd(b.SandboxID, tokA)), 401)
	// The agent's native service (Init sets its token) is spaced's alone.
	wantError(t, h.do("POST", "/spaceagent.v1.Agent/Init", `{}`, envd(a.SandboxID, tokA)), 404)
	if n := len(h.dials); n != 1 {
		t.Fatalf("refused requests dialled the sandbox: %v", h.dials)
	}

	// /health is open; /files without a token goes on without one (the
	// agent checks the URL signature).
	decode(t, h.do("GET", "/health", nil, envd(a.SandboxID, "")), &s)
	if s.Path != "/health" || s.Token != "" {
		t.Fatalf("health: %+v", s)
	}
	decode(t, h.do("GET", "/files?path=x&signature=v1_abc", nil, envd(a.SandboxID, "")), &s)
	if s.Path != "/files" || s.Token != "" {
		t.Fatalf("signed files: %+v", s)
	}

	// Gone sandboxes answer 502, which the SDKs read as "not running".
	// The message is E2B's: the SDKs tell "the sandbox is gone" by it.
	h.api("DELETE", "/sandboxes/"+a.SandboxID, nil)
	for _, id := range []string{a.SandboxID, "nosuchsandbox"} {
		if e := wantError(t, h.do("GET", "/health", nil, envd(id, "")), 502); e.Message != "The sandbox was not found" {
			t.Fatalf("gone sandbox: %q", e.Message)
		}
	}
	wantError(t, h.do("GET", "/health", nil, map[string]string{headerSandboxID: "../etc"}), 400)
	wantError(t, h.do("GET", "/health", nil, map[string]string{headerSandboxID: b.SandboxID, headerSandboxPort: "http"}), 400)
	wantError(t, h.do("GET", "/health", nil, map[string]string{headerSandboxPort: "49983"}), 400)
}

func TestProxyOpenAccess(t *testing.T) {
	h := newHarness(t)
	resp := h.api("POST", "/sandboxes", map[string]any{"templateID": "base", "secure": false})
	var sb sandboxJSON
	decode(t, resp, &sb)
	var s seen
	decode(t, h.do("POST", "/process.Process/List", `{}`, envd(sb.SandboxID, "")), &s)
	if s.Token != h.fake.token(sb.SandboxID) {
		t.Fatalf("an open sandbox's agent gets spaced's token; got %+v", s)
	}
	// Its code interpreter gets the token derived for it (the SDK sends
	// none); no other port gets any.
	for port, want := range map[string]string{"49999": accesstoken.Interpreter(h.fake.token(sb.SandboxID)), "8080": ""} {
		decode(t, h.do("POST", "/execute", `{}`, map[string]string{headerSandboxID: sb.SandboxID, headerSandboxPort: port}), &s)
		if s.Token != want {
			t.Fatalf("port %s of an open sandbox got token %q, want %q", port, s.Token, want)
		}
	}
}

// TestProxyInterpreterToken: whatever listens on 49999 never gets the
// sandbox's access token (which opens the agent): the proxy checks the
// client's and sends the interpreter's own.
func TestProxyInterpreterToken(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	tok := h.fake.token(sb.SandboxID)
	to := func(token string) map[string]string {
		return map[string]string{headerSandboxID: sb.SandboxID, headerSandboxPort: "49999", headerAccessToken: token}
	}
	var s seen
	decode(t, h.do("POST", "/execute", `{}`, to(tok)), &s)
	if s.Token != accesstoken.Interpreter(tok) || s.Token == tok {
		t.Fatalf("the interpreter got %q, want the derived token", s.Token)
	}
	wantError(t, h.do("POST", "/execute", `{}`, to("wrong")), 401)
	decode(t, h.do("GET", "/health", nil, to("")), &s)
	if s.Token != "" {
		t.Fatalf("a request without a token reached the interpreter with %q", s.Token)
	}
}

// TestProxyInterpreterContexts: the SDKs' context calls carry no access
// token, only the traffic token of a sandbox with private ports. That
// proves the caller as well, so the interpreter gets the derived token;
// without either it gets none (and treats the call as anonymous).
func TestProxyInterpreterContexts(t *testing.T) {
	h := newHarness(t)
	pub := h.create(nil)
	priv := h.create(map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	call := func(sb sandboxJSON, traffic string) map[string]string {
		m := map[string]string{headerSandboxID: sb.SandboxID, headerSandboxPort: "49999"}
		if traffic != "" {
			m[headerTraffic] = traffic
		}
		return m
	}
	derived := func(sb sandboxJSON) string { return accesstoken.Interpreter(h.fake.token(sb.SandboxID)) }
	var s seen
	for _, tc := range []struct {
		name    string
		sb      sandboxJSON
		traffic string
		want    string
	}{
		{"public, nothing", pub, "", ""},
		{"public, a wrong traffic token", pub, "nope", ""},
		{"public, its traffic token", pub, trafficToken(h.fake.token(pub.SandboxID)), derived(pub)},
		{"private, its traffic token", priv, *priv.TrafficAccessToken, derived(priv)},
	} {
		decode(t, h.do("POST", "/contexts", `{}`, call(tc.sb, tc.traffic)), &s)
		if s.Path != "/contexts" || s.Token != tc.want || s.Traffic != "" {
			t.Errorf("%s: the interpreter saw %+v, want token %q", tc.name, s, tc.want)
		}
	}
	dials := len(h.dials)
	for _, traffic := range []string{"", "nope", *priv.TrafficAccessToken + "x"} {
		wantError(t, h.do("POST", "/contexts", `{}`, call(priv, traffic)), 403)
	}
	if len(h.dials) != dials {
		t.Fatalf("refused requests dialled the sandbox: %v", h.dials[dials:])
	}
}

func TestProxyUserPorts(t *testing.T) {
	h := newHarness(t)
	pub := h.create(nil)
	priv := h.create(map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})

	// By host name, as get_host(port) gives it; the Host is kept and no
	// token travels to the user's service.
	host := "8080-" + pub.SandboxID + ".localhost:1234"
	var s seen
	decode(t, h.do("GET", "/app?q=1", nil, map[string]string{"Host": host, headerAccessToken: "tok"}), &s)
	if s.Path != "/app" || s.Query != "q=1" || s.Host != host || s.Token != "" || h.lastDial() != "10.0.0.1:8080" {
		t.Fatalf("user port by host: %+v via %s", s, h.lastDial())
	}
	decode(t, h.do("GET", "/x", nil, map[string]string{headerSandboxID: pub.SandboxID, headerSandboxPort: "3000"}), &s)
	if s.Path != "/x" || h.lastDial() != "10.0.0.1:3000" {
		t.Fatalf("user port by header: %+v via %s", s, h.lastDial())
	}
	decode(t, h.do("GET", "/health", nil, map[string]string{"Host": "49983-" + pub.SandboxID + ".localhost"}), &s)
	if s.Path != "/health" || h.lastDial() != "10.0.0.1:49983" {
		t.Fatalf("envd by host: %+v via %s", s, h.lastDial())
	}

	privHost := map[string]string{"Host": "8080-" + priv.SandboxID + ".localhost"}
	wantError(t, h.do("GET", "/", nil, privHost), 403)
	privHost[headerTraffic] = "nope"
	wantError(t, h.do("GET", "/", nil, privHost), 403)
	privHost[headerTraffic] = *priv.TrafficAccessToken
	decode(t, h.do("GET", "/", nil, privHost), &s)
	if s.Traffic != "" || h.lastDial() != "10.0.0.2:8080" {
		t.Fatalf("private port with its token: %+v via %s", s, h.lastDial())
	}
}

func TestProxySignedURLs(t *testing.T) {
	h := newHarness(t)
	h.create(nil)
	b := h.create(nil)
	tokB := h.fake.token(b.SandboxID)
	exp := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	q := url.Values{"path": {"/home/user/f"}, "signature_expiration": {exp},
		"signature": {fileSignature("/home/user/f", "write", "", tokB, exp)}}

	// No header names the sandbox: the one whose token signed it is found.
	var s seen
	decode(t, h.do("POST", "/files?"+q.Encode(), "data", nil), &s)
	if s.Path != "/files" || s.Token != "" || h.lastDial() != "10.0.0.2:49983" {
		t.Fatalf("signed upload: %+v via %s", s, h.lastDial())
	}
	// Signed for write, so it does not read; and a changed path fails.
	wantError(t, h.do("GET", "/files?"+q.Encode(), nil, nil), 401)
	q.Set("path", "/etc/shadow")
	wantError(t, h.do("POST", "/files?"+q.Encode(), "data", nil), 401)
}

// The proxy streams: the first event reaches the client while the agent
// is still holding the second.
func TestProxyStreams(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	resp := h.do("POST", "/stream", `{}`, envd(sb.SandboxID, sb.EnvdAccessToken))
	r := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "first\n" {
			t.Fatalf("first chunk %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk was held back by the proxy")
	}
	h.release <- "second"
	rest, _ := io.ReadAll(r)
	if string(rest) != "second" {
		t.Fatalf("rest %q", rest)
	}
}

// A live but stuck agent does not hold a proxied call until the client
// gives up: /health (is_running) is answered within the agent's health
// bound with E2B's 502, in words the SDKs read as "unreachable, state
// unknown", not "not found".
func TestProxyStuckAgent(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	start := time.Now()
	resp := h.do("GET", "/health?stuck=1", nil, envd(sb.SandboxID, sb.EnvdAccessToken))
	var body errorJSON
	decode(t, resp, &body)
	if resp.StatusCode != 502 || body != (errorJSON{Code: 502, Message: msgNoAnswer}) {
		t.Fatalf("stuck /health: %d %+v", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("stuck /health answered after %s", took)
	}
}

func TestHostRoute(t *testing.T) {
	for host, want := range map[string]string{
		"8080-abc123.localhost":        "abc123:8080",
		"8080-abc123.localhost:7070":   "abc123:8080",
		"49983-abc123.e2b.example.com": "abc123:49983",
		"8080-ABC123.localhost":        "abc123:8080",
		"localhost:7070":               "",
		"127.0.0.1:7070":               "",
		"8080-abc123":                  "",
		"api.example.com":              "",
		"x8080-abc.localhost":          "",
		"8080-ab_c.localhost":          "",
	} {
		rt, ok := hostRoute(host)
		got := ""
		if ok {
			got = rt.id + ":" + strconv.Itoa(rt.port)
		}
		if got != want {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
}

func TestErrorJSONShape(t *testing.T) {
	b, _ := json.Marshal(errorJSON{Code: 404, Message: "m"})
	if string(b) != `{"code":404,"message":"m"}` {
		t.Fatal(string(b))
	}
}

// A Connect stream cut off by its sandbox (killed, paused) drops the
// client's connection, as E2B's envd's does when its VM goes: the client
// reads what came and then a transport error, never an end of stream (a
// stream ended with an error is not what the JS SDK probes /health for,
// so it never said "killed or reached its end of life").
func TestProxyDropsCutStreams(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	hdr := envd(sb.SandboxID, sb.EnvdAccessToken)
	hdr["Content-Type"] = "application/connect+json"
	first := string(envelope(0, `{"event":{"start":{"pid":7}}}`))
	for _, path := range []string{"/cut", "/cut-mid-envelope", "/cut-large"} {
		body, err := io.ReadAll(h.do("POST", path, `{}`, hdr).Body)
		if err == nil {
			t.Fatalf("%s: the stream ended cleanly: %q", path, body)
		}
		if !strings.HasPrefix(string(body), first) || strings.Contains(string(body), "unavailable") {
			t.Fatalf("%s: body %q, want what the sandbox sent and no end of stream", path, body)
		}
	}
}

// TestProxyEarlyAnswerKeepsConnection: the sandbox answers before the
// client has sent all of its (chunked) body, so the proxy's transport is
// still reading it when the answer is complete. The client reads the
// answer, sends the rest, and its next request on the same connection is
// answered: before, the server read the connection for that next request
// while the transport's read was in progress, panicked ("invalid
// concurrent Body.Read call") and closed it.
func TestProxyEarlyAnswerKeepsConnection(t *testing.T) {
	h := newHarness(t)
	sb := h.create(nil)
	c, br := h.rawConn()
	io.WriteString(c, "POST /early HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"+
		headerLines(envd(sb.SandboxID, sb.EnvdAccessToken))+"\r\n5\r\nhello\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "early" {
		t.Fatalf("first answer %d %q", resp.StatusCode, body)
	}
	io.WriteString(c, "0\r\n\r\n")
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n"+headerLines(envd(sb.SandboxID, ""))+"\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the next request on the connection: %v (the connection was closed)", err)
	}
	resp.Body.Close()
}

// TestProxyUnreadBodyKeepsConnection: a request with a body whose sandbox
// cannot be dialled is answered 502 without its body being read, and the
// client's next request on the same connection is answered. With full
// duplex on and the body never read, net/http panicked reading the next
// request ("invalid concurrent Body.Read call", golang/go#68560) and
// closed the connection: the E2B JS SDK's next call on it failed with
// "fetch failed" in CI.
func TestProxyUnreadBodyKeepsConnection(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Dial = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("refused") }
	})
	sb := h.create(nil)
	c, br := h.rawConn()
	hdr := headerLines(envd(sb.SandboxID, sb.EnvdAccessToken))
	body := `{"path":"/tmp"}`
	for i := range 2 {
		fmt.Fprintf(c, "POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", len(body), hdr, body)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the connection: %v (the connection was closed)", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 {
			t.Fatalf("request %d: status %d, want a 5xx (the sandbox cannot be dialled)", i+1, resp.StatusCode)
		}
	}
}

// rawConn is a connection to the server under test, for requests written
// by hand; it is closed at the test's end.
func (h *harness) rawConn() (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", h.srv.Listener.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// headerLines are hdr as an HTTP/1.1 request's header lines.
func headerLines(hdr map[string]string) string {
	var b strings.Builder
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	return b.String()
}
