package console

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
)

const testKey = "space_test_key_0123456789"

// Two tenants' keys beside the admin's testKey.
const (
	alphaKey = "e2b_alpha_key_0123456789"
	betaKey  = "e2b_beta_key_0123456789"
)

// fakeKeys stands for the tenant service: testKey is the admin's, the
// others tenant alpha's and beta's, until revoked.
type fakeKeys struct {
	mu       sync.Mutex
	revoked  map[string]bool
	onRevoke []func(string)
}

var testPrincipals = map[string]Who{
	testKey:  {Tenant: "default", KeyID: "admin", Admin: true},
	alphaKey: {Tenant: "alpha", KeyID: "e2b_alpha"},
	betaKey:  {Tenant: "beta", KeyID: "e2b_beta"},
}

func (k *fakeKeys) Who(key string) (Who, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := testPrincipals[key]
	if !ok || k.revoked[p.KeyID] {
		return Who{}, ErrWrongKey
	}
	return p, nil
}

func (k *fakeKeys) OnRevoke(fn func(string)) {
	k.mu.Lock()
	k.onRevoke = append(k.onRevoke, fn)
	k.mu.Unlock()
}

func (k *fakeKeys) revoke(id string) {
	k.mu.Lock()
	if k.revoked == nil {
		k.revoked = map[string]bool{}
	}
	k.revoked[id] = true
	hooks := k.onRevoke
	k.mu.Unlock()
	for _, fn := range hooks {
		fn(id)
	}
}

// fakeAPI stands for the public API: it checks the key as httpapi does and
// records what it was sent.
type fakeAPI struct {
	got []*http.Request
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := testPrincipals[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; !ok {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.got = append(f.got, r)
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"path":"` + r.URL.Path + `"}`))
}

type fixture struct {
	c     *Console
	api   *fakeAPI
	keys  *fakeKeys
	audit *AuditLog
	log   *bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{api: &fakeAPI{}, keys: &fakeKeys{}, log: &bytes.Buffer{}}
	f.audit = NewAuditLog(10)
	c, err := New(Options{API: f.api, Keys: f.keys, Audit: f.audit, DefaultTenant: "default", Logger: slog.New(slog.NewTextHandler(f.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) do(method, path, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://console.test"+path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.c.ServeHTTP(w, r)
	return w
}

// signIn signs in with the admin's key and returns the session cookie
// and CSRF token.
func (f *fixture) signIn(t *testing.T) (cookie, csrf string) {
	t.Helper()
	return f.signInWith(t, testKey)
}

func (f *fixture) signInWith(t *testing.T, key string) (cookie, csrf string) {
	t.Helper()
	w := f.do("POST", "/ui/session", `{"key":"`+key+`"}`, "Content-Type", "application/json", "Origin", "http://console.test")
	if w.Code != http.StatusOK {
		t.Fatalf("sign in: %d %s", w.Code, w.Body)
	}
	var s sessionJSON
	json.Unmarshal(w.Body.Bytes(), &s)
	for _, c := range w.Result().Cookies() {
		if c.Name == cookieName {
			return c.Name + "=" + c.Value, s.CSRF
		}
	}
	t.Fatal("no session cookie")
	return "", ""
}

func TestSignIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		headers []string
		status  int
	}{
		{"right key", `{"key":"` + testKey + `"}`, []string{"Content-Type", "application/json", "Origin", "http://console.test"}, 200},
		{"wrong key", `{"key":"nope"}`, []string{"Content-Type", "application/json", "Origin", "http://console.test"}, 401},
		{"empty key", `{"key":""}`, []string{"Content-Type", "application/json", "Origin", "http://console.test"}, 400},
		{"form post (what a cross-site form can send)", `key=` + testKey, []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://console.test"}, 415},
		{"other origin", `{"key":"` + testKey + `"}`, []string{"Content-Type", "application/json", "Origin", "http://evil.test"}, 403},
		{"no origin", `{"key":"` + testKey + `"}`, []string{"Content-Type", "application/json"}, 403},
		{"cross-site fetch", `{"key":"` + testKey + `"}`, []string{"Content-Type", "application/json", "Origin", "http://console.test", "Sec-Fetch-Site", "cross-site"}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			w := f.do("POST", "/ui/session", tc.body, tc.headers...)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			setCookie := w.Header().Get("Set-Cookie")
			if tc.status != 200 {
				if setCookie != "" {
					t.Errorf("refused sign-in set a cookie: %s", setCookie)
				}
			} else {
				for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/"} {
					if !strings.Contains(setCookie, attr) {
						t.Errorf("cookie %q lacks %s", setCookie, attr)
					}
				}
				if strings.Contains(setCookie, "Secure") {
					t.Errorf("cookie over plain HTTP is Secure (the browser would drop it): %s", setCookie)
				}
				if strings.Contains(w.Body.String(), testKey) || strings.Contains(setCookie, testKey) {
					t.Errorf("the key came back to the browser")
				}
			}
			if strings.Contains(f.log.String(), testKey) || strings.Contains(f.log.String(), "nope") {
				t.Errorf("a key reached the log:\n%s", f.log)
			}
		})
	}
}

func TestCookieSecureUnderTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
		hdr  string
	}{
		{"spaced serves TLS", true, ""},
		{"a proxy ended TLS", false, "https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			r := httptest.NewRequest("POST", "https://console.test/ui/session", strings.NewReader(`{"key":"`+testKey+`"}`))
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if tc.hdr != "" {
				r.Header.Set("X-Forwarded-Proto", tc.hdr)
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Origin", "https://console.test")
			w := httptest.NewRecorder()
			f.c.ServeHTTP(w, r)
			if w.Code != 200 || !strings.Contains(w.Header().Get("Set-Cookie"), "Secure") {
				t.Fatalf("status %d, cookie %q: want a Secure cookie", w.Code, w.Header().Get("Set-Cookie"))
			}
		})
	}
}

func TestGateway(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn(t)
	other := "space_console=" + randomToken()
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		headers []string
		status  int
		apiPath string // what the API saw; "" when it saw nothing
	}{
		{"no session", "GET", "/ui/api/v1/sandboxes", nil, 401, ""},
		{"unknown session", "GET", "/ui/api/v1/sandboxes", []string{"Cookie", other}, 401, ""},
		{"read", "GET", "/ui/api/v1/sandboxes?state=running", []string{"Cookie", cookie}, 200, "/v1/sandboxes"},
		{"metrics", "GET", "/ui/api/metrics", []string{"Cookie", cookie}, 200, "/metrics"},
		{"not an API route", "GET", "/ui/api/debug/pprof/", []string{"Cookie", cookie}, 404, ""},
		{"change without token", "DELETE", "/ui/api/v1/sandboxes/x", []string{"Cookie", cookie, "Origin", "http://console.test"}, 403, ""},
		{"change with a wrong token", "DELETE", "/ui/api/v1/sandboxes/x", []string{"Cookie", cookie, "Origin", "http://console.test", csrfHeader, "x" + csrf}, 403, ""},
		{"change from another origin", "POST", "/ui/api/v1/sandboxes", []string{"Cookie", cookie, "Origin", "http://127.0.0.1:9", csrfHeader, csrf}, 403, ""},
		{"change without Origin", "POST", "/ui/api/v1/sandboxes", []string{"Cookie", cookie, csrfHeader, csrf}, 403, ""},
		{"change marked same-site", "POST", "/ui/api/v1/sandboxes", []string{"Cookie", cookie, "Origin", "http://console.test", csrfHeader, csrf, "Sec-Fetch-Site", "same-site"}, 403, ""},
		{"change", "POST", "/ui/api/v1/sandboxes", []string{"Cookie", cookie, "Origin", "http://console.test", csrfHeader, csrf, "Sec-Fetch-Site", "same-origin"}, 200, "/v1/sandboxes"},
		{"websocket from another origin", "GET", "/ui/api/v1/sandboxes/x/pty", []string{"Cookie", cookie, "Upgrade", "websocket", "Origin", "http://evil.test"}, 403, ""},
		{"websocket without Origin", "GET", "/ui/api/v1/sandboxes/x/pty", []string{"Cookie", cookie, "Upgrade", "websocket"}, 403, ""},
		{"websocket", "GET", "/ui/api/v1/sandboxes/x/pty", []string{"Cookie", cookie, "Upgrade", "websocket", "Origin", "http://console.test"}, 200, "/v1/sandboxes/x/pty"},
		{"audit", "GET", "/ui/audit", []string{"Cookie", cookie}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.api.got = nil
			w := f.do(tc.method, tc.path, "{}", tc.headers...)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.apiPath == "" {
				if len(f.api.got) > 0 {
					t.Fatalf("the API was called: %s", f.api.got[0].URL)
				}
				return
			}
			if len(f.api.got) != 1 {
				t.Fatalf("the API got %d requests", len(f.api.got))
			}
			r := f.api.got[0]
			if r.URL.Path != tc.apiPath {
				t.Errorf("API path %q, want %q", r.URL.Path, tc.apiPath)
			}
			if r.Header.Get("Cookie") != "" || r.Header.Get(csrfHeader) != "" {
				t.Errorf("browser credentials reached the API: %v", r.Header)
			}
		})
	}
}

func TestSignOut(t *testing.T) {
	f := newFixture(t)
	cookie, csrf := f.signIn(t)
	if w := f.do("DELETE", "/ui/session", "", "Cookie", cookie, "Origin", "http://console.test"); w.Code != 403 {
		t.Fatalf("sign-out without the CSRF token: %d", w.Code)
	}
	if w := f.do("DELETE", "/ui/session", "", "Cookie", cookie, "Origin", "http://console.test", csrfHeader, csrf); w.Code != 204 {
		t.Fatalf("sign-out: %d", w.Code)
	}
	if w := f.do("GET", "/ui/session", "", "Cookie", cookie); w.Code != 401 {
		t.Fatalf("session after sign-out: %d", w.Code)
	}
}

func TestSignInLimit(t *testing.T) {
	f := newFixture(t)
	hdr := []string{"Content-Type", "application/json", "Origin", "http://console.test"}
	for i := 0; i < 10; i++ {
		if w := f.do("POST", "/ui/session", `{"key":"wrong"}`, hdr...); w.Code != 401 {
			t.Fatalf("attempt %d: %d", i, w.Code)
		}
	}
	if w := f.do("POST", "/ui/session", `{"key":"`+testKey+`"}`, hdr...); w.Code != http.StatusTooManyRequests {
		t.Fatalf("after 10 failures: %d, want 429", w.Code)
	}
}

var inlineScript = regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)

func TestIndexHeaders(t *testing.T) {
	f := newFixture(t)
	w := f.do("GET", "/ui/", "")
	if w.Code != 200 {
		t.Fatalf("GET /ui/: %d", w.Code)
	}
	csp := w.Header().Get("Content-Security-Policy")
	m := regexp.MustCompile(`'nonce-([^']+)'`).FindStringSubmatch(csp)
	if m == nil || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	body := w.Body.String()
	if !strings.Contains(body, `nonce="`+m[1]+`"`) {
		t.Errorf("the page does not carry its response's nonce")
	}
	if inlineScript.MatchString(body) {
		t.Errorf("the page has an inline script:\n%s", body)
	}
	if !regexp.MustCompile(`assets/app\.js\?v=[0-9a-f]{16}"`).MatchString(body) {
		t.Errorf("the page does not name a versioned app.js:\n%s", body)
	}
	if again := f.do("GET", "/ui/", ""); again.Header().Get("Content-Security-Policy") == csp {
		t.Errorf("two responses had the same nonce")
	}
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	js := f.do("GET", "/ui/assets/app.js", "")
	if js.Code != 200 || !strings.HasPrefix(js.Header().Get("Content-Type"), "text/javascript") {
		t.Errorf("app.js: %d %q", js.Code, js.Header().Get("Content-Type"))
	}
	gz := f.do("GET", "/ui/assets/app.js", "", "Accept-Encoding", "gzip, deflate")
	zr, err := gzip.NewReader(gz.Body)
	if err != nil || gz.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("app.js for a browser that takes gzip: %q, %v", gz.Header().Get("Content-Encoding"), err)
	}
	if plain, _ := io.ReadAll(zr); !bytes.Equal(plain, js.Body.Bytes()) {
		t.Errorf("gzipped app.js is not app.js")
	}
	if w := f.do("GET", "/ui", ""); w.Code != http.StatusMovedPermanently {
		t.Errorf("GET /ui: %d", w.Code)
	}
}

func TestAuditLog(t *testing.T) {
	a := NewAuditLog(2)
	for _, sb := range []string{"a", "b", "c"} {
		a.Add(AuditEntry{Message: "egress denied", Attrs: map[string]string{"sandbox": sb}})
	}
	got := a.Entries()
	if len(got) != 2 || got[0].Attrs["sandbox"] != "c" || got[1].Attrs["sandbox"] != "b" {
		t.Fatalf("entries %+v, want c then b", got)
	}
}

// TestAuditOfTenants: a tenant's session reads its own tenant's egress
// denials only; the admin's reads every tenant's (the positive control).
func TestAuditOfTenants(t *testing.T) {
	f := newFixture(t)
	for _, d := range [][2]string{{"sb-alpha", "alpha"}, {"sb-beta", "beta"}, {"sb-old", ""}} {
		f.audit.Add(AuditEntry{Message: "egress denied", Attrs: map[string]string{"sandbox": d[0], "tenant": d[1]}})
	}
	for _, tc := range []struct {
		key  string
		want []string // sandboxes, newest first
	}{
		{alphaKey, []string{"sb-alpha"}},
		{betaKey, []string{"sb-beta"}},
		{testKey, []string{"sb-old", "sb-beta", "sb-alpha"}},
	} {
		cookie, _ := f.signInWith(t, tc.key)
		w := f.do("GET", "/ui/audit", "", "Cookie", cookie)
		var got struct {
			Entries []AuditEntry `json:"entries"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil {
			t.Fatalf("audit as %s: %d %s %v", testPrincipals[tc.key].Tenant, w.Code, w.Body, err)
		}
		var sandboxes []string
		for _, e := range got.Entries {
			sandboxes = append(sandboxes, e.Attrs["sandbox"])
		}
		if strings.Join(sandboxes, ",") != strings.Join(tc.want, ",") {
			t.Errorf("audit as %s shows %v, want %v", testPrincipals[tc.key].Tenant, sandboxes, tc.want)
		}
	}
}

// TestSessionOfTenant: the session says whose it is (never the key).
func TestSessionOfTenant(t *testing.T) {
	f := newFixture(t)
	for key, want := range map[string]sessionJSON{
		alphaKey: {Tenant: "alpha", KeyID: "e2b_alpha"},
		testKey:  {Tenant: "default", KeyID: "admin", Admin: true},
	} {
		cookie, _ := f.signInWith(t, key)
		w := f.do("GET", "/ui/session", "", "Cookie", cookie)
		var got sessionJSON
		json.Unmarshal(w.Body.Bytes(), &got)
		if w.Code != 200 || got.Tenant != want.Tenant || got.KeyID != want.KeyID || got.Admin != want.Admin || got.CSRF == "" {
			t.Errorf("session of %s: %d %s, want %+v", want.Tenant, w.Code, w.Body, want)
		}
		if strings.Contains(w.Body.String(), key) {
			t.Errorf("the session answer holds the key")
		}
	}
}

// TestRevokedKeyEndsSessions: revoking a key ends its sessions at once,
// before their next request; another key's session goes on.
func TestRevokedKeyEndsSessions(t *testing.T) {
	f := newFixture(t)
	doomed, _ := f.signInWith(t, alphaKey)
	kept, _ := f.signInWith(t, betaKey)
	for _, c := range []string{doomed, kept} {
		if w := f.do("GET", "/ui/api/v1/sandboxes", "", "Cookie", c); w.Code != 200 {
			t.Fatalf("before the revocation: %d", w.Code)
		}
	}
	f.keys.revoke("e2b_alpha")
	f.c.sessions.mu.Lock()
	left := len(f.c.sessions.m)
	f.c.sessions.mu.Unlock()
	if left != 1 {
		t.Errorf("%d sessions in memory after the revocation, want 1 (the other key's): the revoked key is still held", left)
	}
	f.api.got = nil
	if w := f.do("GET", "/ui/api/v1/sandboxes", "", "Cookie", doomed); w.Code != 401 || len(f.api.got) != 0 {
		t.Errorf("the revoked key's session: %d (the API saw %d requests), want 401 and none", w.Code, len(f.api.got))
	}
	if w := f.do("GET", "/ui/session", "", "Cookie", doomed); w.Code != 401 {
		t.Errorf("the revoked key's session: %d, want 401", w.Code)
	}
	if w := f.do("GET", "/ui/api/v1/sandboxes", "", "Cookie", kept); w.Code != 200 {
		t.Errorf("the other key's session after the revocation: %d", w.Code)
	}
	if w := f.do("POST", "/ui/session", `{"key":"`+alphaKey+`"}`, "Content-Type", "application/json", "Origin", "http://console.test"); w.Code != 401 {
		t.Errorf("sign-in with the revoked key: %d, want 401", w.Code)
	}
}
