package redteam

import (
	"bufio"

	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

const serverLimits = "spaced's http.Server: MaxHeaderBytes 64 KiB, ReadHeaderTimeout 10 s; JSON bodies capped at 1 MiB (httpapi.decodeJSON)"

// rawExchange writes req on a fresh connection and returns the status line.
func rawExchange(d *harness.Daemon, req string, body io.Reader) (string, error) {
	c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	go func() {
		io.WriteString(c, req)
		if body != nil {
			io.Copy(c, body)
		}
	}()
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func wantStatus(codes ...string) func(string, error) error {
	return func(line string, err error) error { return checkStatus(line, err, codes) }
}

func checkStatus(line string, err error, codes []string) error {
	if err != nil && line == "" {
		// The server may cut the connection instead of answering.
		return nil
	}
	for _, c := range codes {
		if strings.Contains(line, " "+c+" ") || strings.HasSuffix(line, " "+c) {
			return nil
		}
	}
	return fmt.Errorf("answer %q, want one of %v", line, codes)
}

// openConns opens n connections that each call write on their conn, and
// returns a function that closes them all.
func openConns(d *harness.Daemon, n int, write func(c net.Conn)) (func(), error) {
	var mu sync.Mutex
	var conns []net.Conn
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
		conns = append(conns, c)
		mu.Unlock()
		go func() {
			select {
			case <-stop:
			default:
				write(c)
			}
		}()
	}
	return func() {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
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
		{id: "cp-oversized-header", category: "control-plane", desc: "one 200 KiB header", stops: serverLimits,
			run: func(t *testing.T) error {
				return wantStatus("431", "400")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 200<<10)+"\r\n\r\n", nil))
			}},
		{id: "cp-many-headers", category: "control-plane", desc: "10,000 small headers", stops: serverLimits,
			run: func(t *testing.T) error {
				var b strings.Builder
				for i := 0; i < 10000; i++ {
					fmt.Fprintf(&b, "X-H%d: v\r\n", i)
				}
				return wantStatus("431", "400")(rawExchange(d(), "GET /healthz HTTP/1.1\r\nHost: x\r\n"+b.String()+"\r\n", nil))
			}},
		{id: "cp-oversized-url", category: "control-plane", desc: "a 1 MiB request URL", stops: serverLimits,
			run: func(t *testing.T) error {
				return wantStatus("431", "414", "400")(rawExchange(d(), "GET /v1/sandboxes?x="+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\nHost: x\r\n\r\n", nil))
			}},
		{id: "cp-oversized-json", category: "control-plane", desc: "a 64 MiB JSON body to create, run a command, set a timeout, mkdir, move and stdin", stops: serverLimits,
			run: func(t *testing.T) error {
				id := sb().ID
				for _, p := range []string{"/v1/sandboxes", "/v1/sandboxes/" + id + "/commands", "/v1/sandboxes/" + id + "/timeout", "/v1/sandboxes/" + id + "/files/mkdir", "/v1/sandboxes/" + id + "/files/move", "/v1/sandboxes/" + id + "/commands/1/stdin"} {
					body := io.MultiReader(strings.NewReader(`{"cmd":"`), io.LimitReader(repeatReader('a'), 64<<20), strings.NewReader(`"}`))
					line, err := rawExchange(d(), fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", p, auth(), 64<<20+10), body)
					if err := wantStatus("400", "413", "404")(line, err); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				return nil
			}},
		{id: "cp-oversized-json-e2b", category: "control-plane", desc: "a 64 MiB JSON body to the E2B create and timeout routes", stops: "e2bcompat: JSON bodies read through a size limit",
			run: func(t *testing.T) error {
				for _, p := range []string{"/sandboxes", "/v2/sandboxes", "/sandboxes/" + sb().ID + "/timeout"} {
					body := io.MultiReader(strings.NewReader(`{"templateID":"`), io.LimitReader(repeatReader('a'), 64<<20), strings.NewReader(`"}`))
					line, err := rawExchange(d(), fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", p, env.d.APIKey, 64<<20+17), body)
					if err := wantStatus("400", "413")(line, err); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				return nil
			}},
		{id: "cp-json-nesting", category: "control-plane", desc: "900 KiB of nested JSON arrays to create", stops: "encoding/json's nesting limit; the 1 MiB body cap",
			run: func(t *testing.T) error {
				body := strings.Repeat("[", 900<<10)
				return wantStatus("400")(rawExchange(d(), fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", auth(), len(body), body), nil))
			}},
		{id: "cp-smuggling", category: "control-plane", desc: "request smuggling: Content-Length and chunked Transfer-Encoding together, hiding an unauthenticated DELETE of a sandbox (natively) and an unauthenticated envd call to the neighbour (through the proxy)", stops: "Go's net/http frames by Transfer-Encoding and parses what follows as a request of its own, which is authenticated like any other; the E2B proxy re-serialises every request",
			run: func(t *testing.T) error {
				id, n := sb().ID, getNeighbour(t, env.d).sb
				hidden := "DELETE /v1/sandboxes/" + id + " HTTP/1.1\r\nHost: x\r\n\r\n"
				body := "0\r\n\r\n" + hidden
				line, err := rawExchange(d(), fmt.Sprintf("POST /v1/sandboxes/%s/timeout HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", id, auth(), len(body), body), nil)
				hidden2 := "POST /filesystem.Filesystem/Remove HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: " + n.ID + "\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"path\":\"" + neighbourMarkerPath + "\"}"
				body2 := "0\r\n\r\n" + hidden2
				rawExchange(d(), fmt.Sprintf("POST /process.Process/List HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", id, sb().AccessToken, len(body2), body2), nil)
				time.Sleep(300 * time.Millisecond)
				if got, gerr := env.d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), id); gerr != nil || got.State != client.StateRunning {
					return fmt.Errorf("the hidden DELETE went through: %+v %v (first answer %q)", got, gerr, line)
				}
				return wantStatus("400", "200")(line, err) // guard checks the neighbour's marker
			}},
		{id: "cp-bad-sandbox-header", category: "control-plane", desc: "E2b-Sandbox-Id holding a path, an encoded path, 10 KiB and upper case", stops: "e2bcompat: ids must match ^[a-z0-9]{1,64}$",
			run: func(t *testing.T) error {
				f := &cpFixture{d: env.d}
				for _, id := range []string{"../" + sb().ID, sb().ID + "/../x", sb().ID + "%2F..", strings.Repeat("a", 10<<10), "A" + sb().ID[1:]} {
					st, b, err := f.envd(id, sb().AccessToken, "POST", "/process.Process/List", []byte("{}"), nil)
					if err := refused(400, 502, 503)(st, b, err); err != nil {
						return fmt.Errorf("id %q: %w", id, err)
					}
				}
				return nil
			}},
		{id: "cp-slowloris", category: "control-plane", desc: "300 connections sending their headers one byte every 200 ms", stops: serverLimits + "; goroutine per connection, nothing shared held",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					closeAll, err := openConns(env.d, 300, func(c net.Conn) { dribble(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ", 200*time.Millisecond) })
					if err != nil {
						return err
					}
					defer closeAll()
					time.Sleep(6 * time.Second)
					return nil
				})
			}},
		{id: "cp-slow-body", category: "control-plane", desc: "100 connections sending a 1 MiB create body one byte every 200 ms", stops: "goroutine per connection; no lock held while a body is read",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					closeAll, err := openConns(env.d, 100, func(c net.Conn) {
						fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n", auth())
						dribble(c, `{"metadata":{"a":"`, 200*time.Millisecond)
					})
					if err != nil {
						return err
					}
					defer closeAll()
					time.Sleep(6 * time.Second)
					return nil
				})
			}},
		{id: "cp-conn-flood", category: "control-plane", desc: "1,000 idle connections held open", stops: "goroutine per connection; IdleTimeout",
			run: func(t *testing.T) error {
				return underAttack(t, env.d, func() error {
					closeAll, err := openConns(env.d, 1000, func(net.Conn) {})
					if err != nil {
						return err
					}
					defer closeAll()
					time.Sleep(3 * time.Second)
					return nil
				})
			}},
		{id: "cp-sse-watch-unread", category: "control-plane", desc: "a file watch SSE stream that is never read while the sandbox makes 5,000 files", stops: "spaced writes events with a deadline and holds none back; the agent's watcher is bounded",
			run: func(t *testing.T) error {
				id := sb().ID
				return underAttack(t, env.d, func() error {
					c, err := stalledSSEGet(env.d, "/v1/sandboxes/"+id+"/files/watch?path=/home/user/w&recursive=true")
					if err != nil {
						return err
					}
					defer c.Close()
					_, err = env.d.Exec(harness.Ctx(t, time.Minute), id, client.CommandRequest{Cmd: `python3 -c "
import os
for i in range(5000): open('/home/user/w/%d' % i, 'w').close()"`})
					return err
				})
			}},
		{id: "cp-sse-many-unread", category: "control-plane", desc: "20 command SSE streams of chatty commands, none read, closed as their heartbeats come due", stops: "per-stream write deadlines; per-process buffers in the agent",
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
