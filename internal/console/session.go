package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	cookieName = "space_console"
	csrfHeader = "X-CSRF-Token"
	// maxSessions bounds the sessions kept; the least recently used goes.
	maxSessions = 1024
)

// session is one signed-in browser. The API key it was signed in with is
// kept here (spaced's memory) and added to the calls it forwards; its
// principal says whose it is (what /ui/audit shows it).
type session struct {
	key     string
	who     Who
	csrf    string
	created time.Time

	mu       sync.Mutex
	lastSeen time.Time
}

func (s *session) checkCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf)) == 1
}

// sessions are indexed by a hash of the cookie, so what is in memory does
// not open a session by itself.
type sessions struct {
	idle, maxAge time.Duration

	mu sync.Mutex
	m  map[string]*session
}

func newSessions(idle, maxAge time.Duration) *sessions {
	return &sessions{idle: idle, maxAge: maxAge, m: map[string]*session{}}
}

func sessionID(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session for key, of principal who, and returns its
// cookie value.
func (ss *sessions) create(key string, who Who) (string, *session) {
	cookie := randomToken()
	now := time.Now()
	s := &session{key: key, who: who, csrf: randomToken(), created: now, lastSeen: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweepLocked(now)
	if len(ss.m) >= maxSessions {
		var oldest string
		var at time.Time
		for id, o := range ss.m {
			o.mu.Lock()
			if oldest == "" || o.lastSeen.Before(at) {
				oldest, at = id, o.lastSeen
			}
			o.mu.Unlock()
		}
		delete(ss.m, oldest)
	}
	ss.m[sessionID(cookie)] = s
	return cookie, s
}

// get returns the live session of cookie, or nil.
func (ss *sessions) get(cookie string) *session {
	if cookie == "" {
		return nil
	}
	id := sessionID(cookie)
	now := time.Now()
	ss.mu.Lock()
	s := ss.m[id]
	ss.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.lastSeen) > ss.idle || now.Sub(s.created) > ss.maxAge {
		ss.delete(cookie)
		return nil
	}
	s.lastSeen = now
	return s
}

func (ss *sessions) delete(cookie string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sessionID(cookie))
}

// endKey ends every session of key keyID and says how many.
func (ss *sessions) endKey(keyID string) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	n := 0
	for id, s := range ss.m {
		if s.who.KeyID == keyID {
			delete(ss.m, id)
			n++
		}
	}
	return n
}

func (ss *sessions) clear() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	clear(ss.m)
}

func (ss *sessions) sweepLocked(now time.Time) {
	for id, s := range ss.m {
		s.mu.Lock()
		dead := now.Sub(s.lastSeen) > ss.idle || now.Sub(s.created) > ss.maxAge
		s.mu.Unlock()
		if dead {
			delete(ss.m, id)
		}
	}
}

func sessionCookie(r *http.Request) string {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	return c.Value
}

// setCookie sets (or, with maxAge < 0, clears) the session cookie: never
// readable by script, never sent by another site, Secure when the request
// came over TLS (to spaced, or to a proxy in front that says so).
func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     Prefix,
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
		SameSite: http.SameSiteStrictMode,
	})
}

// sessionJSON is what the page learns of its session: the CSRF token it
// sends back on every state-changing call, and whose the session is (the
// key's tenant and public ID, and whether it is the admin key, which the
// page shows the node's pages to). Never the key.
type sessionJSON struct {
	CSRF      string    `json:"csrf"`
	CreatedAt time.Time `json:"created_at"`
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	Admin     bool      `json:"admin"`
}

func (s *session) json() sessionJSON {
	return sessionJSON{CSRF: s.csrf, CreatedAt: s.created, Tenant: s.who.Tenant, KeyID: s.who.KeyID, Admin: s.who.Admin}
}

// maxSignInBody bounds the sign-in request.
const maxSignInBody = 16 << 10

// signIn checks an API key (Options.Keys, the API's own judge) and starts
// a session as its principal. The key comes in a JSON body (never a URL)
// and is never logged.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if reason := crossSite(r); reason != "" {
		c.refuse(w, r, reason)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_argument", "send the key as JSON: {\"key\": \"...\"}")
		return
	}
	client := remoteHost(r)
	if !c.limiter.allow(client) {
		writeError(w, http.StatusTooManyRequests, "resource_exhausted", "too many failed sign-ins; wait a minute")
		return
	}
	var req struct {
		Key string `json:"key"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSignInBody))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || strings.TrimSpace(req.Key) == "" {
		writeError(w, http.StatusBadRequest, "invalid_argument", "send the key as JSON: {\"key\": \"...\"}")
		return
	}
	key := strings.TrimSpace(req.Key)
	who, err := c.opts.Keys.Who(key)
	switch {
	case errors.Is(err, ErrWrongKey):
		c.limiter.failed(client)
		c.log.Warn("console sign-in refused", "remote", client)
		writeError(w, http.StatusUnauthorized, "unauthenticated", "invalid API key")
		return
	case err != nil:
		c.log.Error("console sign-in failed", "remote", client, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cannot check the key now; try again")
		return
	}
	cookie, s := c.sessions.create(key, who)
	setCookie(w, r, cookie, 0)
	c.log.Info("console sign-in", "remote", client, "tenant", who.Tenant, "key", who.KeyID)
	writeJSON(w, http.StatusOK, s.json())
}

func (c *Console) session(w http.ResponseWriter, r *http.Request, s *session) {
	writeJSON(w, http.StatusOK, s.json())
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.delete(sessionCookie(r))
	setCookie(w, r, "", -1)
	w.WriteHeader(http.StatusNoContent)
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// signinLimiter refuses sign-ins from an address that failed too often in
// the last window.
type signinLimiter struct {
	max    int
	window time.Duration

	mu       sync.Mutex
	failures map[string][]time.Time
}

func newSigninLimiter(max int, window time.Duration) *signinLimiter {
	return &signinLimiter{max: max, window: window, failures: map[string][]time.Time{}}
}

func (l *signinLimiter) recent(addr string, now time.Time) []time.Time {
	var keep []time.Time
	for _, t := range l.failures[addr] {
		if now.Sub(t) < l.window {
			keep = append(keep, t)
		}
	}
	if keep == nil {
		delete(l.failures, addr)
	} else {
		l.failures[addr] = keep
	}
	return keep
}

func (l *signinLimiter) allow(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recent(addr, time.Now())) < l.max
}

func (l *signinLimiter) failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if len(l.failures) > 4096 { // bound the memory many addresses can take
		for a := range l.failures {
			l.recent(a, now)
		}
	}
	l.failures[addr] = append(l.recent(addr, now), now)
}
