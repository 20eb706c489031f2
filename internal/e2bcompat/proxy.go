package e2bcompat

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/bodylimit"
	"github.com/spacesandbox/space/internal/httpjson"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// proxy is the sandbox side: it checks a request against the target
// sandbox's token and forwards it, streaming both ways, to that sandbox.
type proxy struct {
	targets Targets
	// checkpoints resumes an auto-resume sandbox that traffic wakes.
	checkpoints Checkpoints
	rp          *httputil.ReverseProxy
}

// upstream is where one request goes; it rides in the request context from
// serve to the ReverseProxy's Rewrite.
type upstream struct {
	id   string
	port int
	// addr is ip:port, the Host an agent sees.
	addr string
	envd bool
	// token is the X-Access-Token sent upstream: the sandbox's to the agent,
	// the one derived for it to the code interpreter. Empty sends what the
	// client sent to the agent (which then checks a /files signature) and
	// nothing to any other port.
	token string
}

type upstreamKey struct{}

var connectErrors = connect.NewErrorWriter()

// What E2B's proxy answers when a sandbox is gone or a port is closed. The
// SDKs tell the cases apart by these words ("was not found": the sandbox
// is not running; "port is not open": it runs, nothing listens).
const (
	msgSandboxNotFound = "The sandbox was not found"
	msgPortNotOpen     = "The sandbox is running but port is not open"
	msgNoAnswer        = "The sandbox did not answer in time"
)

// InterpreterPort is where E2B's code-interpreter SDKs find their server.
const InterpreterPort = 49999

// nativeAgentPrefix is the agent's native service, which only spaced uses.
const nativeAgentPrefix = "/spaceagent.v1.Agent/"

func newProxy(tg Targets, ck Checkpoints, tr http.RoundTripper, log *slog.Logger) *proxy {
	p := &proxy{targets: tg, checkpoints: ck}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.In.Context().Value(upstreamKey{}).(*upstream)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = sandbox.PortHost(u.id, u.port)
			h := pr.Out.Header
			h.Del(headerSandboxID)
			h.Del(headerSandboxPort)
			h.Del(headerTraffic)
			if !u.envd {
				// No user port gets the client's token: whatever listens
				// there may be any process in the sandbox. The code
				// interpreter gets its own narrower one (u.token).
				h.Del(headerAccessToken)
			}
			if u.token != "" {
				h.Set(headerAccessToken, u.token)
			}
			if u.envd {
				pr.Out.Host = u.addr
			}
			// A user's service keeps the Host the client used.
			if pr.Out.Host == "" {
				pr.Out.Host = u.addr
			}
		},
		// Flush every write: Connect server-streams must reach the client
		// event by event.
		FlushInterval: -1,
		Transport:     tr,
		// A stream cut off because its sandbox ended is reported here
		// ("read error during body copy"); the client's connection is
		// dropped (see forward). Not news.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			u := r.Context().Value(upstreamKey{}).(*upstream)
			woken, _ := sandbox.WakeError(err)
			switch _, terr := p.targets.Target(u.id); {
			case errors.Is(terr, errdefs.ErrNotFound):
				// It ended (or paused) while the request was on its way.
				writeProxyError(w, r, http.StatusBadGateway, msgSandboxNotFound)
			case errors.Is(err, syscall.ECONNREFUSED):
				writeProxyError(w, r, http.StatusBadGateway, msgPortNotOpen)
			case woken != nil:
				// A resting sandbox spaced could not wake (its budget):
				// spaced's own answer, with its status.
				status, _ := errdefs.HTTPStatus(woken)
				writeProxyError(w, r, status, errdefs.PublicMessage(woken))
			case errors.Is(err, sandbox.ErrSilent):
				// The agent or interpreter is stuck (or the connection
				// dead): the SDKs read this as "unreachable, state unknown".
				httpjson.LoggerOf(r.Context()).WarnContext(r.Context(), "e2b proxy: sandbox did not answer in time", "sandbox", u.id, "port", u.port, "path", r.URL.Path, "err", err)
				writeProxyError(w, r, http.StatusBadGateway, msgNoAnswer)
			default:
				httpjson.LoggerOf(r.Context()).WarnContext(r.Context(), "e2b proxy: sandbox unreachable", "sandbox", u.id, "port", u.port, "path", r.URL.Path, "err", err)
				writeProxyError(w, r, http.StatusBadGateway, "the sandbox is not reachable: it may have stopped")
			}
		},
	}
	return p
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request, rt route) {
	switch {
	case !sandboxIDPattern.MatchString(rt.id):
		writeProxyError(w, r, http.StatusBadRequest, "invalid or missing E2b-Sandbox-Id")
		return
	case rt.port == 0:
		writeProxyError(w, r, http.StatusBadRequest, "E2b-Sandbox-Port must be a port number")
		return
	}
	t, err := p.targets.Target(rt.id)
	if errors.Is(err, errdefs.ErrNotFound) {
		t, err = p.autoResume(r, rt)
	}
	switch {
	case errors.Is(err, errdefs.ErrQuotaExceeded) || errors.Is(err, errdefs.ErrCapacity):
		// The traffic had the right to wake the sandbox, but its tenant's
		// quota or the node's budget has no room for it: say so (403 or
		// 503, with the limit), and it stays paused.
		status, _ := errdefs.HTTPStatus(err)
		writeProxyError(w, r, status, errdefs.PublicMessage(err))
		return
	case err != nil:
		// 502 is what E2B's proxy answers for a sandbox that is gone; the SDKs
		// read it as "not running" (is_running() is false).
		if !errors.Is(err, errdefs.ErrNotFound) {
			httpjson.LoggerOf(r.Context()).ErrorContext(r.Context(), "e2b proxy: look up sandbox", "sandbox", rt.id, "err", err)
		}
		writeProxyError(w, r, http.StatusBadGateway, msgSandboxNotFound)
		return
	}
	addr := netip.AddrPortFrom(t.IP, uint16(rt.port)).String()
	var u *upstream
	if rt.port == EnvdPort {
		if strings.HasPrefix(r.URL.Path, nativeAgentPrefix) {
			// spaced's own channel to the agent (Init sets the token): not for
			// E2B clients, whatever token they hold.
			writeProxyError(w, r, http.StatusNotFound, "no such envd endpoint")
			return
		}
		token, status, msg := envdAccess(r, t)
		if status != 0 {
			writeProxyError(w, r, status, msg)
			return
		}
		u = &upstream{id: t.ID, port: rt.port, addr: addr, envd: true, token: token}
	} else {
		if status, msg := portAccess(r, t); status != 0 {
			writeProxyError(w, r, status, msg)
			return
		}
		u = &upstream{id: t.ID, port: rt.port, addr: addr}
		if rt.port == InterpreterPort {
			// E2B's code-interpreter SDKs send the sandbox's token to
			// /execute (none when it was made with secure=false) and, on
			// every route, the traffic token of a sandbox with private
			// ports; their context calls send nothing else. A request
			// that proved itself either way is the owner's: the
			// interpreter gets the token derived for it, never the
			// sandbox's own. Without it the interpreter treats the
			// request as anonymous (internal/interpreter's doc, Auth).
			got := r.Header.Get(headerAccessToken)
			switch {
			case got != "" && !equal(got, t.AccessToken):
				writeProxyError(w, r, http.StatusUnauthorized, "invalid access token")
				return
			case got != "" || t.OpenAccess || hasTrafficToken(r, t):
				u.token = accesstoken.Interpreter(t.AccessToken)
			}
		}
	}
	p.forward(w, r, u)
}

// AutoResumeKey names, in audit lines and metrics, the principal a resume
// on traffic runs as: the sandbox's tenant, by no API key.
const AutoResumeKey = "auto-resume"

// autoResume resumes a paused sandbox created with autoResume when r has
// the right to reach it (the same checks as for a running one), and
// returns its target; anything else stays NotFound.
func (p *proxy) autoResume(r *http.Request, rt route) (sandbox.Target, error) {
	paused, err := p.targets.AutoResumeTarget(r.Context(), rt.id)
	if err != nil {
		return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is not running", rt.id)
	}
	status := 0
	if rt.port == EnvdPort {
		_, status, _ = envdAccess(r, paused)
	} else {
		status, _ = portAccess(r, paused)
	}
	if status != 0 {
		return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is not running", rt.id)
	}
	httpjson.LoggerOf(r.Context()).InfoContext(r.Context(), "e2b proxy: resuming a paused sandbox on traffic", "sandbox", rt.id)
	// The proxy's requests carry no API key: the resume runs as the
	// sandbox's own tenant, so that tenant's quotas hold for it (without a
	// principal it would run as spaced's own, which no quota limits).
	ctx := tenant.NewContext(r.Context(), tenant.Principal{Tenant: tenant.Of(paused.Tenant), Key: AutoResumeKey})
	if _, err := p.checkpoints.Resume(ctx, rt.id, 0); err != nil {
		return sandbox.Target{}, err
	}
	return p.targets.Target(rt.id)
}

// serveSignedFile forwards a /files request that carries an envd URL
// signature but names no sandbox: the sandbox is the one whose token made
// the signature. The agent checks the signature (and its expiry) again.
func (p *proxy) serveSignedFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		op = "write"
	}
	path, user, exp, sig := q.Get("path"), q.Get("username"), q.Get("signature_expiration"), q.Get("signature")
	id, ok := p.targets.FindRunning(func(token string) bool {
		return equal(fileSignature(path, op, user, token, exp), sig)
	})
	if !ok {
		writeProxyError(w, r, http.StatusUnauthorized, "the signature matches no running sandbox")
		return
	}
	t, err := p.targets.Target(id)
	if err != nil {
		writeProxyError(w, r, http.StatusBadGateway, msgSandboxNotFound)
		return
	}
	addr := netip.AddrPortFrom(t.IP, EnvdPort).String()
	p.forward(w, r, &upstream{id: t.ID, port: EnvdPort, addr: addr, envd: true})
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request, u *upstream) {
	// Let the transport read the request body while the response streams
	// (client streams over HTTP/1.1), and end its reads before returning.
	r, done := bodylimit.FullDuplex(w, r)
	defer done()
	r = r.WithContext(context.WithValue(r.Context(), upstreamKey{}, u))
	// The sandbox going away (killed, paused, lost) while its answer
	// streams makes the ReverseProxy abort the handler, which drops the
	// client's connection (HTTP/2: resets the stream), as E2B's envd's does
	// when its VM goes. The SDKs see a transport failure, probe /health
	// (502 "The sandbox was not found" once it is gone) and raise their own
	// "killed or reached its end of life" error; the JS SDK does so only for
	// a dropped connection, not for a stream ended with an error.
	p.rp.ServeHTTP(w, r)
}

// envdAccess decides what a request to the agent's port may do. It returns
// the token to send to the agent, or an HTTP status and message to refuse.
//   - GET /health is open, as in envd.
//   - A sandbox made with secure=false is open: spaced adds its token.
//   - Otherwise X-Access-Token must be this sandbox's token. /files may
//     instead carry a URL signature, which the agent checks.
func envdAccess(r *http.Request, t sandbox.Target) (string, int, string) {
	got := r.Header.Get(headerAccessToken)
	switch {
	case r.URL.Path == "/health" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return "", 0, ""
	case t.OpenAccess:
		return t.AccessToken, 0, ""
	case got != "":
		if !equal(got, t.AccessToken) {
			if r.URL.Path == "/files" {
				return "", http.StatusUnauthorized, msgTokenMismatch
			}
			return "", http.StatusUnauthorized, msgUnauthorized
		}
		return t.AccessToken, 0, ""
	case r.URL.Path == "/files":
		return "", 0, ""
	}
	return "", http.StatusUnauthorized, msgUnauthorized
}

// envd's texts for a request without the sandbox's token
// (WithAuthorization, validateSigning).
const (
	msgUnauthorized  = "unauthorized access, please provide a valid access token or method signing if supported"
	msgTokenMismatch = "access token present in header but does not match"
)

// portAccess checks a request to a user's port. Ports are private unless
// the sandbox was made public (allowPublicTraffic, which an E2B create
// sets unless it says false, as E2B does; the native API's
// network.public_ports): a private port needs the traffic access token
// or the sandbox's own access token.
func portAccess(r *http.Request, t sandbox.Target) (int, string) {
	if t.Network != nil && t.Network.AllowPublicTraffic != nil && *t.Network.AllowPublicTraffic {
		return 0, ""
	}
	if hasTrafficToken(r, t) {
		return 0, ""
	}
	if tok := r.Header.Get(headerAccessToken); tok != "" && equal(tok, t.AccessToken) {
		return 0, ""
	}
	return http.StatusForbidden, "this sandbox's ports are private: send e2b-traffic-access-token"
}

// hasTrafficToken says whether r carries t's traffic access token.
func hasTrafficToken(r *http.Request, t sandbox.Target) bool {
	tok := r.Header.Get(headerTraffic)
	return tok != "" && equal(tok, trafficToken(t.AccessToken))
}

// trafficToken is the token for a sandbox's private ports, derived from its
// access token so that nothing more needs storing.
func trafficToken(accessToken string) string {
	m := hmac.New(sha256.New, []byte(accessToken))
	m.Write([]byte("e2b-traffic-access-token"))
	return hex.EncodeToString(m.Sum(nil))[:40]
}

// fileSignature is envd's /files URL signature; expiration is unix seconds
// or empty.
func fileSignature(path, op, user, token, expiration string) string {
	parts := []string{path, op, user, token}
	if expiration != "" {
		parts = append(parts, expiration)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// writeProxyError answers in the form the caller understands: a Connect
// error for Connect RPCs, else E2B's {"code","message"} JSON.
func writeProxyError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if isRPC(r.URL.Path) && connectErrors.IsSupported(r) {
		code := connect.CodeUnavailable
		switch status {
		case http.StatusUnauthorized:
			code = connect.CodeUnauthenticated
		case http.StatusForbidden:
			code = connect.CodePermissionDenied
		case http.StatusBadRequest:
			code = connect.CodeInvalidArgument
		case http.StatusNotFound:
			code = connect.CodeNotFound
		}
		_ = connectErrors.Write(w, r, connect.NewError(code, errors.New(msg)))
		return
	}
	writeJSON(w, status, errorJSON{Code: status, Message: msg})
}

func isRPC(path string) bool {
	for _, p := range []string{"/process.Process/", "/filesystem.Filesystem/", nativeAgentPrefix} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
