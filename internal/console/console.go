// Package console is the web console spaced serves at /ui/: a page built
// from web/console (scripts/build-console.sh) and embedded here, a sign-in
// that turns an API key into a session, and a gateway (/ui/api/...) that
// forwards the page's calls to the public API in-process with the
// session's key. The page speaks only the public API, as any client does;
// the key stays in spaced's memory and never reaches the page, a URL or a
// log.
//
// Sessions are HttpOnly, SameSite=Strict cookies (Secure under TLS). Every
// state-changing call needs the session's CSRF token in X-CSRF-Token and a
// same-origin Origin; a WebSocket needs a same-origin Origin. Pages carry a
// Content-Security-Policy that allows no inline script.
package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/httpjson"
)

// Prefix is where the console is served.
const Prefix = "/ui/"

// Options configure the console.
type Options struct {
	// API is the public API's handler (the native /v1 routes, /metrics
	// and /healthz); the console's calls go to it with the session's key.
	API http.Handler
	// Keys judges the keys signed in with (the tenant service): a session
	// is whose its key is, and ends when the key is revoked.
	Keys Keys
	// DefaultTenant is the tenant of audit lines that name none (what
	// objects made before tenants existed belong to).
	DefaultTenant string
	// Audit holds recent audit lines (egress denials); nil shows none.
	Audit *AuditLog
	// Logger gets sign-ins and refusals (never a key or a cookie).
	Logger *slog.Logger
	// IdleTimeout ends a session unused this long (8 h if 0); MaxAge ends
	// any session this long after sign-in (24 h if 0).
	IdleTimeout, MaxAge time.Duration
}

// Keys is what the console needs of the tenant service.
type Keys interface {
	// Who says whose key is: ErrWrongKey (wrapped) for a key that opens
	// nothing, another error when it cannot tell now.
	Who(key string) (Who, error)
	// OnRevoke has fn told the ID of every key revoked.
	OnRevoke(fn func(keyID string))
}

// Who is whose a key, and so a session, is.
type Who struct {
	Tenant string
	// KeyID is the key's public ID.
	KeyID string
	// Admin: the admin key, which sees every tenant's.
	Admin bool
}

// Owns reports whether w may see what belongs to tenant owner.
func (w Who) Owns(owner string) bool { return w.Admin || owner == w.Tenant }

// ErrWrongKey is Keys.Who's answer to a key that opens nothing.
var ErrWrongKey = errors.New("invalid API key")

// Console serves /ui/.
type Console struct {
	opts     Options
	log      *slog.Logger
	sessions *sessions
	limiter  *signinLimiter
	assets   *assets
	mux      *http.ServeMux
}

// New returns the console's handler; mount it at Prefix.
func New(opts Options) (*Console, error) {
	if opts.Keys == nil {
		return nil, errors.New("console: no key judge (Options.Keys)")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 8 * time.Hour
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = 24 * time.Hour
	}
	a, err := loadAssets()
	if err != nil {
		return nil, err
	}
	c := &Console{
		opts:     opts,
		log:      opts.Logger,
		sessions: newSessions(opts.IdleTimeout, opts.MaxAge),
		limiter:  newSigninLimiter(10, time.Minute),
		assets:   a,
	}
	// A revoked key's sessions end at once (its streams through the
	// gateway end with the key, in the API).
	opts.Keys.OnRevoke(func(keyID string) {
		if n := c.sessions.endKey(keyID); n > 0 {
			c.log.Info("console sessions of a revoked key ended", "key", keyID, "sessions", n)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/{$}", c.index)
	mux.HandleFunc("GET /ui/assets/{file}", c.asset)
	mux.HandleFunc("POST /ui/session", c.signIn)
	mux.HandleFunc("GET /ui/session", c.withSession(c.session))
	mux.HandleFunc("DELETE /ui/session", c.withSession(c.signOut))
	mux.HandleFunc("GET /ui/audit", c.withSession(c.audit))
	mux.HandleFunc("/ui/api/", c.withSession(c.forward))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no console route for "+r.Method+" "+r.URL.Path)
	})
	c.mux = mux
	return c, nil
}

// ServeHTTP serves the console with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// Close ends every session.
func (c *Console) Close() { c.sessions.clear() }

type ctxKey struct{}

// withSession answers 401 unless the request carries a live session, and
// 403 when a state-changing request (or a WebSocket) is not from the
// console's own origin or lacks the session's CSRF token.
func (c *Console) withSession(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.sessions.get(sessionCookie(r))
		if s == nil {
			writeError(w, http.StatusUnauthorized, "unauthenticated", "sign in to the console")
			return
		}
		if reason := crossSite(r); reason != "" {
			c.refuse(w, r, reason)
			return
		}
		if !safeMethod(r.Method) && !s.checkCSRF(r.Header.Get(csrfHeader)) {
			c.refuse(w, r, "missing or wrong "+csrfHeader)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)), s)
	}
}

func (c *Console) refuse(w http.ResponseWriter, r *http.Request, reason string) {
	c.log.Warn("console refused a request", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"), "reason", reason)
	writeError(w, http.StatusForbidden, "permission_denied", "request refused: "+reason)
}

// safeMethod: methods that change nothing, so need no CSRF token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossSite says why r must be refused as coming from another origin, or
// "". A state-changing request and a WebSocket handshake need an Origin of
// this host (browsers send one on both); any request a browser marks as
// cross-site or same-site-but-cross-origin is refused too.
func crossSite(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site " + r.Header.Get("Sec-Fetch-Site")
	}
	origin := r.Header.Get("Origin")
	upgrade := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	if origin == "" {
		if upgrade || !safeMethod(r.Method) {
			return "no Origin header"
		}
		return ""
	}
	if !sameOrigin(origin, r) {
		return "Origin " + origin + " is not this console's"
	}
	return ""
}

// sameOrigin compares an Origin header with the host the request was sent
// to (the scheme too when spaced itself serves TLS).
func sameOrigin(origin string, r *http.Request) bool {
	scheme, host, ok := strings.Cut(origin, "://")
	if !ok || !strings.EqualFold(host, r.Host) {
		return false
	}
	if r.TLS != nil {
		return scheme == "https"
	}
	return scheme == "http" || scheme == "https" // https: TLS ended by a proxy in front
}

// writeError answers in the API's error shape.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	httpjson.WriteStatus(w, httpjson.Native, status, code, msg, nil)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	httpjson.Write(w, status, v)
}
