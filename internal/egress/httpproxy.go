package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// proxyHTTP forwards plain HTTP request by request, so that every request
// on a kept-alive connection is checked, not only the first: each must
// name the host the connection was allowed for (want; "" for a connection
// allowed by address, whose requests may name no host). CONNECT is
// refused: the gateway is not a forward proxy.
func (g *Gateway) proxyHTTP(c *conn, cl side, up net.Conn, req *http.Request, want string) {
	upBr := bufio.NewReader(up)
	d := policy.Dest{Name: want, IP: c.orig.Addr(), Port: c.orig.Port()}
	for {
		err := checkRequest(req, want)
		if err == nil {
			err = g.applySecrets(c, req, want)
		}
		if err != nil {
			g.audit(c.sb, "http", d, "", err.Error())
			req.Body.Close()
			refuse(cl, err.Error())
			return
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = nil // Write would add Go's
		}
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			// The body is needed before anything goes upstream (it is
			// searched for placeholders): ask for it now.
			req.Header.Del("Expect")
			io.WriteString(cl, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		err = req.Write(up)
		req.Body.Close()
		if err != nil {
			return
		}
		resp, err := readFinalResponse(upBr, req)
		if err != nil {
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Write(cl)
			splice(cl, &bufferedConn{Conn: up, r: upBr})
			return
		}
		err = resp.Write(cl)
		resp.Body.Close()
		if err != nil || resp.Close || req.Close {
			return
		}
		if req, err = http.ReadRequest(cl.br); err != nil {
			return
		}
	}
}

// readFinalResponse skips informational answers (100, 102, 103), which
// the client, whose Expect was answered by the gateway, does not wait for.
func readFinalResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, err
		}
	}
}

func checkRequest(req *http.Request, want string) error {
	if req.Method == http.MethodConnect {
		return fmt.Errorf("CONNECT %s refused: the gateway is not a proxy", req.Host)
	}
	name, err := requestHost(req)
	if err != nil {
		return err
	}
	if name != want {
		return fmt.Errorf("request for host %q on a connection allowed for %q", name, want)
	}
	return nil
}

// refuse answers 403 with the reason and closes.
func refuse(w net.Conn, reason string) {
	body := "space egress: " + reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// bufferedConn reads through a reader that may hold bytes already read
// from the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
