package redteam

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

const slowCtl = "at the end, the server still holds at least 90% of the connections open: the attack was in force while spaced's answers were timed"

const serverLimits = "spaced's http.Server: MaxHeaderBytes 64 KiB, ReadHeaderTimeout 10 s; JSON bodies capped at 1 MiB by the route table at the API's edge (internal/bodylimit) and in decodeJSON"

// rawExchange writes req (and then body) on a fresh connection and reads
// the server's answer: its status line and the start of its body. A
// connection that could not be made, or that ended without an answer, is
// an error: a refusal must come from the server.
func rawExchange(d *harness.Daemon, req string, body io.Reader) (string, string, error) {
	c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
	if err != nil {
		return "", "", fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	go func() {
		io.WriteString(c, req)
		if body != nil {
			io.Copy(c, body)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", "", fmt.Errorf("no answer from the server: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.Proto + " " + resp.Status, string(b), nil
}

// wantStatus: the server answered with one of codes (and, if the body
// must say why, with a body holding because).
func wantStatus(codes ...string) func(string, string, error) error {
	return func(line, body string, err error) error { return checkStatus(line, body, err, codes, "") }
}

func checkStatus(line, body string, err error, codes []string, because string) error {
	if err != nil {
		return err
	}
	for _, c := range codes {
		if strings.Contains(line, " "+c+" ") || strings.HasSuffix(line, " "+c) {
			if because != "" && !strings.Contains(body, because) {
				return fmt.Errorf("answer %q %.200q, want it to say %q", line, body, because)
			}
			return nil
		}
	}
	return fmt.Errorf("answer %q %.200q, want one of %v", line, body, codes)
}

// smuggled sends one request whose body hides a second one, and reads
// every answer the server gives on the connection: the hidden request,
// if the server parsed it as one, gets an answer of its own.
func smuggled(d *harness.Daemon, req string) ([]*http.Response, error) {
	c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return nil, err
	}
	c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if len(out) == 0 {
				return nil, fmt.Errorf("no answer: %w", err)
			}
			return out, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, resp)
	}
}

func statuses(rs []*http.Response) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.StatusCode)
	}
	return out
}

// headerTimeout is spaced's ReadHeaderTimeout: a connection that has not
// finished its request headers by then is closed, which is the defence
// working, not the attack failing.
const headerTimeout = 10 * time.Second

// openConns opens n connections that each call write on their conn, and
// returns a function that closes them all and says how many of those the
// server could still hold (opened less than headerTimeout ago, with a
// margin) it still held open.
func openConns(d *harness.Daemon, n int, write func(c net.Conn)) (func() (open, young int), error) {
	type conn struct {
		net.Conn
		opened time.Time
	}
	var mu sync.Mutex
	var conns []conn
	stop := make(chan struct{})
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
		if err != nil {
			close(stop)
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		mu.Lock()
		conns = append(conns, conn{c, time.Now()})
		mu.Unlock()
		go func() {
			select {
			case <-stop:
			default:
				write(c)
			}
		}()
	}
	return func() (open, young int) {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			if time.Since(c.opened) < headerTimeout-2*time.Second {
				young++
				// A connection the server closed reads EOF at once; an
				// open one times out.
				c.SetReadDeadline(time.Now().Add(time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
					open++
				}
			}
			c.Close()
		}
		return open, young
	}, nil
}

// dribble writes s one byte every interval until the connection fails.
func dribble(c net.Conn, s string, interval time.Duration) {
	for i := 0; ; i++ {
		if _, err := c.Write([]byte{s[i%len(s)]}); err != nil {
			return
		}
		time.Sleep(interval)
	}
}

func abuseAttempts(sb func() *client.Sandbox) []attempt {
	d := func() *harness.Daemon { return env.d }
	auth := func() string { return "Authorization: Bearer " + env.d.APIKey + "\r\n" }
	return []attempt{
		{id: "cp-oversized-header", family: "cp-oversized-head", desc: "one 200 KiB header", stops: serverLimits + " (431)",
			control: "the same request with a 1 KiB header answers 200",
			run: func(t *testing.T) error {
				if err := wantStatus("200")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 1<<10)+"\r\nConnection: close\r\n\r\n", nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return wantStatus("431")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 200<<10)+"\r\n\r\n", nil))
			}},
		{id: "cp-many-headers", family: "cp-oversized-head", desc: "10,000 small headers", stops: serverLimits + " (431)",
			control: "the same request with 20 headers answers 200",
			run: func(t *testing.T) error {
				hs := func(n int) string {
					var b strings.Builder
					for i := 0; i < n; i++ {
						fmt.Fprintf(&b, "X-H%d: v\r\n", i)
					}
					return b.String()
				}
				if err := wantStatus("200")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\n"+hs(20)+"Connection: close\r\n\r\n", nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return wantStatus("431")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\n"+hs(10000)+"\r\n", nil))
			}},
		{id: "cp-oversized-url", family: "cp-oversized-head", desc: "a 1 MiB request URL", stops: serverLimits + " (431: the request line counts against the header limit)",
			control: "the same request with a 1 KiB URL and the key answers 200",
			run: func(t *testing.T) error {
				if err := wantStatus("200")(rawExchange(d(), "GET /v1/sandboxes?x="+strings.Repeat("a", 1<<10)+" HTTP/1.1\r\nHost: x\r\n"+auth()+"Connection: close\r\n\r\n", nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return wantStatus("431", "414")(rawExchange(d(), "GET /v1/sandboxes?x="+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\nHost: x\r\n"+auth()+"\r\n", nil))
			}},
		{id: "cp-oversized-json", family: "cp-oversized-body", desc: "a 64 MiB JSON body to create, run a command, set a timeout, mkdir, move and stdin", stops: serverLimits + " (413 \"larger than\" on the declared length, before the body is read)",
			control: "a small body on each route is not refused for its size",
			run: func(t *testing.T) error {
				id := sb().ID
				for _, p := range []string{"/v1/sandboxes", "/v1/sandboxes/" + id + "/commands", "/v1/sandboxes/" + id + "/timeout", "/v1/sandboxes/" + id + "/files/mkdir", "/v1/sandboxes/" + id + "/files/move", "/v1/sandboxes/" + id + "/commands/1/stdin"} {
					send := func(n int64) (string, string, error) {
						body := io.MultiReader(strings.NewReader(`{"rt_unknown":"`), io.LimitReader(repeatReader('a'), n), strings.NewReader(`"}`))
						return rawExchange(d(), fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", p, auth(), n+17), body)
					}
					line, body, err := send(16)
					if err != nil || strings.Contains(line, " 413") || strings.Contains(body, "larger than") {
						return fmt.Errorf("control %s: %q %.200q %v", p, line, body, err)
					}
					line, body, err = send(64 << 20)
					because := "larger than"
					if strings.HasSuffix(p, "/stdin") && strings.Contains(line, " 404") {
						because = "not found"
					}
					if err := checkStatus(line, body, err, []string{"400", "413", "404"}, because); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				return nil
			}},
		{id: "cp-oversized-json-e2b", family: "cp-oversized-body", desc: "a 64 MiB JSON body to the E2B create and timeout routes", stops: "e2bcompat: its route table of body limits (internal/bodylimit): 413 on the declared length, before the body is read",
			run: func(t *testing.T) error {
				for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/" + sb().ID + "/timeout"} {
					body := io.MultiReader(strings.NewReader(`{"templateID":"`), io.LimitReader(repeatReader('a'), 64<<20), strings.NewReader(`"}`))
					line, rb, err := rawExchange(d(), fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", p, env.d.APIKey, 64<<20+17), body)
					if err := wantStatus("400", "413")(line, rb, err); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				return nil
			}},
		{id: "cp-json-nesting", family: "cp-oversized-body", desc: "900 KiB of nested JSON arrays to create", stops: "encoding/json's nesting limit; the 1 MiB body cap (400)",
			run: func(t *testing.T) error {
				body := strings.Repeat("[", 900<<10)
				return wantStatus("400")(rawExchange(d(), fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", auth(), len(body), body), nil))
			}},
		{id: "cp-smuggling", desc: "request smuggling: Content-Length and chunked Transfer-Encoding together, hiding an unauthenticated DELETE of a sandbox (natively) and an unauthenticated envd call to the neighbour (through the proxy)", stops: "Go's net/http frames by Transfer-Encoding and parses what follows as a request of its own, which is authenticated like any other (401); the E2B proxy re-serialises every request",
			control: "the same smuggling with an authenticated GET hidden gets that GET answered 200: the hidden request is parsed and served, so its 401 is authentication's",
			run: func(t *testing.T) error {
				id, n := sb().ID, getNeighbour(t, env.d).sb
				outer := func(hidden string) string {
					body := "0\r\n\r\n" + hidden
					return fmt.Sprintf("POST /v1/sandboxes/%s/timeout HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", id, auth(), len(body), body)
				}
				rs, err := smuggled(env.d, outer("GET /v1/sandboxes/"+id+" HTTP/1.1\r\nHost: x\r\n"+auth()+"Connection: close\r\n\r\n"))
				if err != nil || len(rs) != 2 || rs[1].StatusCode != 200 {
					return fmt.Errorf("control: answers %v (%v), want the outer request's and a 200 for the hidden GET", statuses(rs), err)
				}
				rs, err = smuggled(env.d, outer("DELETE /v1/sandboxes/"+id+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
				if err != nil || len(rs) != 2 || rs[1].StatusCode != 401 {
					return fmt.Errorf("native: answers %v (%v), want the outer request's and a 401 for the hidden DELETE", statuses(rs), err)
				}
				if got, gerr := env.d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), id); gerr != nil || got.State != client.StateRunning {
					return fmt.Errorf("the hidden DELETE went through: %+v %v", got, gerr)
				}
				hidden := "POST /filesystem.Filesystem/Remove HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: " + n.ID + "\r\nContent-Type: application/json\r\nContent-Length: 40\r\nConnection: close\r\n\r\n{\"path\":\"" + neighbourMarkerPath + "\"}"
				body := "0\r\n\r\n" + hidden
				rs, err = smuggled(env.d, fmt.Sprintf("POST /process.Process/List HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", id, sb().AccessToken, len(body), body))
				if err != nil {
					return fmt.Errorf("proxy: %w", err)
				}
				for i, r := range rs[1:] {
					if r.StatusCode != 401 && r.StatusCode != 400 {
						return fmt.Errorf("proxy: the hidden request %d got %d (answers %v)", i+1, r.StatusCode, statuses(rs))
					}
				}
				return nil // guard checks the neighbour's marker
			}},
		{id: "cp-bad-sandbox-header", category: "control-plane", desc: "E2b-Sandbox-Id holding a path, an encoded path, 10 KiB and upper case", stops: "e2bcompat: ids must match ^[a-z0-9]{1,64}$",
			control: "the sandbox's own id with its token answers 200",
			run: func(t *testing.T) error {
				f := &cpFixture{d: env.d}
				if err := ok200(f.envd(sb().ID, sb().AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				for _, id := range []string{"../" + sb().ID, sb().ID + "/../x", sb().ID + "%2F..", strings.Repeat("a", 10<<10), "A" + sb().ID[1:]} {
					st, b, err := f.envd(id, sb().AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)
					if err := refused(400, 502, 503)(st, b, err); err != nil {
						return fmt.Errorf("id %q: %w", id, err)
					}
				}
				return nil
			}},
		{id: "cp-slowloris", category: "control-plane", family: "cp-slow-clients", control: slowCtl, desc: "300 connections sending their headers one byte every 200 ms", stops: serverLimits + "; goroutine per connection, nothing shared held",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					const n = 300
					closeAll, err := openConns(env.d, n, func(c net.Conn) { dribble(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ", 200*time.Millisecond) })
					if err != nil {
						return err
					}
					time.Sleep(6 * time.Second)
					return inForce(closeAll())
				})
			}},
		{id: "cp-slow-body", category: "control-plane", family: "cp-slow-clients", control: slowCtl, desc: "100 connections sending a 1 MiB create body one byte every 200 ms", stops: "goroutine per connection; no lock held while a body is read",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					const n = 100
					closeAll, err := openConns(env.d, n, func(c net.Conn) {
						// The body stays valid JSON as long as it dribbles.
						fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{\"metadata\":{\"a\":\"", auth())
						dribble(c, "a", 200*time.Millisecond)
					})
					if err != nil {
						return err
					}
					time.Sleep(6 * time.Second)
					return inForce(closeAll())
				})
			}},
		{id: "cp-conn-flood", category: "control-plane", family: "cp-slow-clients", control: slowCtl, desc: "1,000 idle connections held open", stops: "goroutine per connection; IdleTimeout",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					closeAll, err := openConns(env.d, 1000, func(net.Conn) {})
					if err != nil {
						return err
					}
					time.Sleep(3 * time.Second)
					return inForce(closeAll())
				})
			}},
		{id: "cp-sse-watch-unread", category: "control-plane", family: "cp-sse-unread", desc: "a file watch SSE stream that is never read while the sandbox makes 5,000 files", stops: "spaced writes events with a deadline and holds none back; the agent's watcher is bounded",
			run: func(t *testing.T) error {
				id := sb().ID
				return underAttack(t, env.d, func() error {
					c, err := stalledSSEGet(env.d, "/v1/sandboxes/"+id+"/files/watch?path=/home/user/w&recursive=true")
					if err != nil {
						return err
					}
					defer c.Close()
					_, err = env.d.Exec(harness.Ctx(t, time.Minute), id, client.CommandRequest{Cmd: `for i in $(seq 5000); do : > /home/user/w/$i; done`})
					return err
				})
			}},
		{id: "cp-sse-many-unread", category: "control-plane", family: "cp-sse-unread", desc: "20 command SSE streams of chatty commands, none read, closed as their heartbeats come due", stops: "per-stream write deadlines; per-process buffers in the agent",
			run: func(t *testing.T) error {
				id := sb().ID
				return underAttack(t, env.d, func() error {
					var conns []net.Conn
					defer func() {
						for _, c := range conns {
							c.Close()
						}
					}()
					for i := 0; i < 20; i++ {
						c, err := stalledSSE(env.d, "/v1/sandboxes/"+id+"/commands", `{"cmd":"yes | head -c 5000000","timeout_seconds":8}`)
						if err != nil {
							return err
						}
						conns = append(conns, c)
					}
					time.Sleep(5 * time.Second)
					return nil
				})
			}},
	}
}

// inForce: at the end of a slow-client attack the server still held at
// least 90% of the connections it could still hold (those younger than its
// header timeout; a loaded machine may take seconds to open them all), and
// at least some were that young, so the attack was in force while spaced's
// responsiveness was measured.
func inForce(open, young int) error {
	if young == 0 || open < young*9/10 {
		return fmt.Errorf("control: only %d of the %d connections opened in the last %s were still open at the end: the attack was not in force", open, young, headerTimeout-2*time.Second)
	}
	return nil
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// stalledSSEGet opens a GET SSE stream and never reads it.
func stalledSSEGet(d *harness.Daemon, path string) (net.Conn, error) {
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		return nil, err
	}
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", path, d.APIKey)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c, nil
}

func TestHTTPAbuse(t *testing.T) {
	d := need(t)
	t.Parallel()
	getNeighbour(t, d)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	sh(t, d, sb.ID, "user", "mkdir -p /home/user/w")
	for _, a := range abuseAttempts(func() *client.Sandbox { return sb }) {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
			}
		})
	}
	guard(t, d)
}
