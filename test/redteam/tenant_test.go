package redteam

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// The cross-tenant attempts: tenant beta, with its own valid key, goes
// after tenant alpha's objects through every route of api/openapi.yaml that
// names an object and every E2B route that does, through the create
// bodies that name objects (a template, a snapshot, a volume, a secret, a
// customer key, a backup), and through every list. Another tenant's object
// must answer exactly as an unknown one does (same status, code and
// message), appear in no list, and come out of the run unchanged.

// tenantFixture is alpha's objects and the two tenants' keys.
type tenantFixture struct {
	d            *harness.Daemon
	alphaKey     string
	betaKey      string
	alphaTenant  string
	betaTenant   string
	sandbox      string // running
	snapshot     string
	volumeID     string
	volumeName   string
	backup       string
	template     string
	build        string
	secret       string
	customerKey  string
	files        string // an uploaded file set's hash
	webhook      string // a lifecycle webhook's id
	alphaStrings []string
}

// as sends one request with key (beta's or alpha's).
func (f *tenantFixture) as(key, method, path string, body []byte) (int, []byte, error) {
	cp := &cpFixture{d: f.d}
	hdr := map[string]string{"Authorization": "Bearer " + key}
	if strings.HasPrefix(path, "/v1/") {
		return cp.req(method, path, body, hdr)
	}
	hdr["Authorization"], hdr["X-API-Key"] = "", key
	return cp.req(method, path, body, hdr)
}

// stream reads a server-sent event stream with key for d, and returns
// what came in that time.
func (f *tenantFixture) stream(key, path string, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+f.d.Addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %d %.200s", path, resp.StatusCode, b)
	}
	b, _ := io.ReadAll(resp.Body) // until the time is up
	return b, nil
}

// unknownLike is an id or name of the same shape as s that nobody has:
// letters for letters, digits for digits, the rest kept.
func unknownLike(s string) string {
	if regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(s) { // a file set's hash
		return harness.RandHex(32)
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = byte('a' + mrand.IntN(26))
		case c >= '0' && c <= '9':
			b[i] = byte('0' + mrand.IntN(10))
		}
	}
	return string(b)
}

// sameAnswer: the answers to an object of another tenant (got) and to an
// unknown object (want) are the same: status, and for an error the code
// and the message with the object's name in it replaced.
func sameAnswer(got, want answer, obj, unknown string) error {
	if got.err != nil || want.err != nil {
		return fmt.Errorf("request failed: %v / %v", got.err, want.err)
	}
	if got.status != want.status {
		return fmt.Errorf("another tenant's object answers %d (%.200s), an unknown one %d (%.200s)", got.status, got.body, want.status, want.body)
	}
	if got.status < 400 {
		return nil
	}
	norm := func(b []byte, name string) string {
		return strings.ReplaceAll(string(b), name, "<object>")
	}
	if g, w := norm(got.body, obj), norm(want.body, unknown); g != w {
		return fmt.Errorf("the bodies differ: another tenant's %q, an unknown %q", g, w)
	}
	return nil
}

type answer struct {
	status int
	body   []byte
	err    error
}

func ask(status int, body []byte, err error) answer { return answer{status, body, err} }

// objectParam maps a path parameter of a route to alpha's object.
func (f *tenantFixture) objectParam(path, param string) (string, bool) {
	switch {
	case param == "{id}" && strings.HasPrefix(path, "/v1/builds/"):
		return f.build, true
	case param == "{id}" && strings.HasPrefix(path, "/v1/sandboxes/"):
		return f.sandbox, true
	case param == "{id}" && (strings.HasPrefix(path, "/sandboxes/") || strings.HasPrefix(path, "/v2/sandboxes/")):
		return f.sandbox, true
	case param == "{id}" && (strings.HasPrefix(path, "/volumes/") || strings.HasPrefix(path, "/volumecontent/")):
		return f.volumeID, true
	case param == "{id}" && (strings.HasPrefix(path, "/templates/") || strings.HasPrefix(path, "/v2/templates/")):
		return f.template, true
	case param == "{build}":
		return f.build, true
	case param == "{snapshot}":
		return f.snapshot, true
	case param == "{volume}":
		return f.volumeName, true
	case param == "{backup}":
		return f.backup, true
	case param == "{name}" && strings.HasPrefix(path, "/v1/templates/"):
		return f.template, true
	case param == "{name}" && strings.HasPrefix(path, "/v1/secrets/"):
		return f.secret, true
	case param == "{key}" && strings.HasPrefix(path, "/v1/keys/"):
		return f.customerKey, true
	case param == "{hash}":
		return f.files, true
	case param == "{id}" && strings.HasPrefix(path, "/events/webhooks/"):
		return f.webhook, true
	}
	return "", false
}

var pathParam = regexp.MustCompile(`\{[a-z]+\}`)

// fill puts obj in the route's object parameter (its first), alpha's
// objects in any other, and harmless values in the rest.
func (f *tenantFixture) fill(path, obj string) string {
	primary, _ := f.objectOf(path)
	u := pathParam.ReplaceAllStringFunc(path, func(p string) string {
		if p == primary {
			return obj
		}
		if o, ok := f.objectParam(path, p); ok {
			return o
		}
		switch p {
		case "{pid}":
			return "1"
		case "{tag}":
			return "default"
		}
		return "x"
	})
	switch {
	case strings.HasPrefix(path, "/volumecontent/"):
		u += "?path=/"
	case strings.Contains(path, "/files") && !strings.HasSuffix(path, "mkdir") && !strings.HasSuffix(path, "move") &&
		!strings.HasPrefix(path, "/v1/files/") && !strings.HasPrefix(path, "/templates/"):
		u += "?path=/home/user"
	}
	return u
}

// objectOf is the route's object parameter and alpha's object for it.
func (f *tenantFixture) objectOf(path string) (param, obj string) {
	for _, p := range pathParam.FindAllString(path, -1) {
		if o, ok := f.objectParam(path, p); ok {
			return p, o
		}
	}
	return "", ""
}

// How the cross-tenant attempts cover each route of the E2B API
// (api/e2b-routes.txt, the router's own table). A route whose path names
// objects is attacked through it; the others are listed here with how
// they are covered. tenantAttempts fails (and with it TestSecurityDoc) for
// a route that is neither, so a new route cannot be missed.
var (
	// e2bPaths are the concrete paths of a route whose path parameters
	// are not object names themselves.
	e2bPaths = map[string][]string{
		"GET /templates/{a}/{b}": {"/templates/aliases/{id}", "/templates/{id}/tags"},
	}
	// e2bBodies are the routes that name their object in the body (%q:
	// the object).
	e2bBodies = map[string]struct{ body, obj string }{
		"POST /templates/tags":   {`{"target":%q,"tags":["rt-beta"]}`, "template:default"},
		"DELETE /templates/tags": {`{"name":%q,"tags":["rt-none"]}`, "template"},
	}
	// e2bNoObject are the routes that name no object of anyone's.
	e2bNoObject = map[string]string{
		"GET /health":            "public, and names nothing",
		"POST /sandboxes":        "a create: the cp-tenant-create attempts name other tenants' objects in its body",
		"POST /v2/sandboxes":     "a create, as POST /sandboxes",
		"GET /sandboxes":         "a list: cp-tenant-list",
		"GET /v2/sandboxes":      "a list: cp-tenant-list",
		"GET /sandboxes/metrics": "a list: cp-tenant-list asks for another tenant's sandbox by id",
		"GET /snapshots":         "a list: cp-tenant-list",
		"GET /volumes":           "a list: cp-tenant-list",
		"GET /templates":         "a list: cp-tenant-list",
		"POST /volumes":          "a create under a new name (volume names are one namespace: a taken one is 409, docs/security.md)",
		"POST /v2/templates":     "a create under a new name (template names are one namespace, as E2B's aliases)",
		"POST /v3/templates":     "a create, as POST /v2/templates",
		"POST /events/webhooks":  "a create: it names a URL, nothing of anyone's (a webhook gets its own tenant's events only: test/e2b TestWebhooks)",
		"GET /events/webhooks":   "a list: cp-tenant-list",
		"PUT /templates/{id}/files/{hash}/upload": "no API key: the signed link names the tenant it uploads for, and " +
			"GET /templates/{id}/files/{hash} gives none for another tenant's template",
	}
)

// nativeNoObject are the routes of api/openapi.yaml that name no object in
// their path, with the attempts that cover them. tenantAttempts fails (and
// with it TestSecurityDoc) for a route that names no object it knows and is
// not listed here, or for one listed here that the spec no longer has.
var nativeNoObject = map[string]string{
	"POST /v1/sandboxes":     "a create: cp-tenant-create-{template,snapshot,volume,secret,customer-key} name alpha's objects in its body",
	"POST /v1/volumes":       "a create: cp-tenant-create-backup names alpha's backup in its body (volume names are one namespace: a taken one is 409, docs/security.md)",
	"POST /v1/builds":        "a create: cp-tenant-create-build-from names alpha's template in its body",
	"GET /v1/sandboxes":      "a list: cp-tenant-list",
	"GET /v1/snapshots":      "a list: cp-tenant-list",
	"GET /v1/volumes":        "a list: cp-tenant-list",
	"GET /v1/volume-backups": "a list: cp-tenant-list",
	"GET /v1/templates":      "a list: cp-tenant-list",
	"GET /v1/builds":         "a list: cp-tenant-list",
	"GET /v1/secrets":        "a list: cp-tenant-list",
	"GET /v1/keys":           "a list: cp-tenant-list",
	"GET /v1/events":         "a feed: cp-tenant-events",
	"GET /v1/usage":          "the caller's own tenant: cp-tenant-usage",
	"GET /metrics":           "every tenant's usage, for the admin key only: cp-tenant-metrics",
}

// e2bRouteName is a route's path as part of an attempt id.
func e2bRouteName(p string) string {
	return strings.NewReplacer("/", "-", "{", "", "}", "").Replace(strings.Trim(p, "/"))
}

// e2bTenantCase is one cross-tenant attempt on an E2B route: a path with
// placeholders, or a body naming the object.
type e2bTenantCase struct {
	method, path, id string
	body             string // with %q for the object, or ""
	obj              string // which of alpha's objects the body names
}

// e2bTenantCases lists the E2B attempts, failing t for a route of the
// router that none covers.
func e2bTenantCases(t testing.TB) []e2bTenantCase {
	var out []e2bTenantCase
	for _, r := range e2bAPIRoutes(t) {
		m, p, _ := strings.Cut(r.pattern, " ")
		switch {
		case e2bNoObject[r.pattern] != "":
		case e2bBodies[r.pattern].body != "":
			b := e2bBodies[r.pattern]
			out = append(out, e2bTenantCase{m, p, strings.ToLower(m) + "-" + e2bRouteName(p), b.body, b.obj})
		case e2bPaths[r.pattern] != nil:
			for _, cp := range e2bPaths[r.pattern] {
				out = append(out, e2bTenantCase{method: m, path: cp, id: strings.ToLower(m) + "-" + e2bRouteName(cp)})
			}
		default:
			if param, _ := (&tenantFixture{}).objectOf(p); param == "" {
				t.Errorf("the E2B route %s names no object the cross-tenant attempts know, and is not listed as covered otherwise: add it to e2bPaths, e2bBodies or e2bNoObject", r.pattern)
				continue
			}
			out = append(out, e2bTenantCase{method: m, path: p, id: strings.ToLower(m) + "-" + e2bRouteName(p)})
		}
	}
	return out
}

func tenantAttempts(t testing.TB, f *tenantFixture) []attempt {
	var out []attempt
	const stops = "tenant.GuardSandbox before every route that names a sandbox; the template, snapshot and volume services look objects up as the caller's tenant; secrets, customer keys and file sets are named per tenant"
	inSpec := map[string]bool{}
	for _, r := range specRoutes(t) {
		if r.public || strings.HasPrefix(r.path, "/v1/admin/") {
			continue
		}
		pattern := r.method + " " + r.path
		inSpec[pattern] = true
		param, _ := (&tenantFixture{}).objectOf(r.path)
		switch {
		case param != "":
		case pathParam.MatchString(r.path):
			t.Errorf("the route %s has a path parameter the cross-tenant attempts do not know: map it to tenant alpha's object in objectParam", pattern)
			continue
		case nativeNoObject[pattern] == "":
			t.Errorf("the route %s names no object in its path and is not listed as covered otherwise: add it to nativeNoObject (with the attempt that covers it)", pattern)
			continue
		default:
			continue
		}
		ctl := ""
		if r.method == "GET" {
			ctl = "alpha's own key on the same route is answered as for an object that exists"
		}
		out = append(out, attempt{id: "cp-tenant-" + r.op, category: "control-plane", family: "cp-tenant", stops: stops, control: ctl,
			desc: "with tenant beta's key, call " + r.method + " " + r.path + " on tenant alpha's object: it must answer as for an unknown one",
			run: func(t *testing.T) error {
				_, obj := f.objectOf(r.path)
				unknown := unknownLike(obj)
				got := ask(f.as(f.betaKey, r.method, f.fill(r.path, obj), r.body()))
				want := ask(f.as(f.betaKey, r.method, f.fill(r.path, unknown), r.body()))
				if err := sameAnswer(got, want, obj, unknown); err != nil {
					return err
				}
				if r.method == "GET" {
					own := ask(f.as(f.alphaKey, r.method, f.fill(r.path, obj), nil))
					if own.err == nil && own.status == want.status && own.status >= 400 && sameAnswer(own, want, obj, unknown) == nil {
						return fmt.Errorf("control: alpha's own key gets the unknown-object answer too (%d %.200s)", own.status, own.body)
					}
				}
				return nil
			}})
	}
	for pattern := range nativeNoObject {
		if !inSpec[pattern] {
			t.Errorf("nativeNoObject lists %s, which api/openapi.yaml does not have", pattern)
		}
	}
	for _, c := range e2bTenantCases(t) {
		desc := "with tenant beta's key in X-API-Key, call the E2B route " + c.method + " " + c.path + " on tenant alpha's object: it must answer as for an unknown one"
		ctl := ""
		if c.method == "GET" || c.method == "DELETE" && c.body != "" {
			ctl = "alpha's own key on the same route is answered as for an object that exists"
		}
		if c.body != "" {
			desc = "with tenant beta's key in X-API-Key, call the E2B route " + c.method + " " + c.path + " with tenant alpha's " + c.obj + " named in the body: it must answer as for an unknown one"
		}
		out = append(out, attempt{id: "cp-tenant-e2b-" + c.id, category: "control-plane", family: "cp-tenant", stops: stops, control: ctl, desc: desc,
			run: func(t *testing.T) error {
				var got, want, own answer
				var obj, unknown string
				if c.body != "" {
					// The answers name the template: compare them by it.
					obj = f.template
					unknown = unknownLike(obj)
					ref := func(name string) string {
						if c.obj == "template:default" {
							return name + ":default"
						}
						return name
					}
					got = ask(f.as(f.betaKey, c.method, c.path, fmt.Appendf(nil, c.body, ref(obj))))
					want = ask(f.as(f.betaKey, c.method, c.path, fmt.Appendf(nil, c.body, ref(unknown))))
					if ctl != "" {
						own = ask(f.as(f.alphaKey, c.method, c.path, fmt.Appendf(nil, c.body, ref(obj))))
					}
				} else {
					_, obj = f.objectOf(c.path)
					unknown = unknownLike(obj)
					var body []byte
					if c.method == "POST" || c.method == "PUT" || c.method == "PATCH" {
						body = []byte(`{}`)
						if strings.HasPrefix(c.path, "/sandboxes/") || strings.HasPrefix(c.path, "/v2/sandboxes/") {
							body = []byte(`{"timeout":60}`)
						}
					}
					got = ask(f.as(f.betaKey, c.method, f.fill(c.path, obj), body))
					want = ask(f.as(f.betaKey, c.method, f.fill(c.path, unknown), body))
					if ctl != "" {
						own = ask(f.as(f.alphaKey, c.method, f.fill(c.path, obj), body))
					}
				}
				if err := sameAnswer(got, want, obj, unknown); err != nil {
					return err
				}
				if ctl != "" && own.err == nil && own.status == want.status && sameAnswer(own, want, obj, unknown) == nil {
					return fmt.Errorf("control: alpha's own key gets the unknown-object answer too (%d %.200s)", own.status, own.body)
				}
				return nil
			}})
	}
	// The feed of sandbox changes names no object: another tenant's
	// sandboxes must not be in it, from now or replayed from the start.
	out = append(out, attempt{id: "cp-tenant-events", category: "control-plane", family: "cp-tenant-list", stops: "GET /v1/events sends a change only to a key that owns its sandbox",
		control: "alpha's own feed, from the same point, shows alpha's sandbox",
		desc:    "with tenant beta's key, follow GET /v1/events replayed from its first change (?after=1) while tenant alpha changes its sandbox, and look for alpha's sandbox",
		run: func(t *testing.T) error {
			type feed struct {
				body []byte
				err  error
			}
			read := func(key string) <-chan feed {
				ch := make(chan feed, 1)
				go func() {
					b, err := f.stream(key, "/v1/events?after=1", 4*time.Second)
					ch <- feed{b, err}
				}()
				return ch
			}
			beta, alpha := read(f.betaKey), read(f.alphaKey)
			time.Sleep(time.Second)
			if st, b, err := f.as(f.alphaKey, "POST", "/v1/sandboxes/"+f.sandbox+"/timeout", []byte(`{"timeout_seconds":1800}`)); err != nil || st >= 300 {
				return fmt.Errorf("alpha's change: %d %.200s %v", st, b, err)
			}
			b, a := <-beta, <-alpha
			if b.err != nil || a.err != nil {
				return fmt.Errorf("the feeds: %v / %v", b.err, a.err)
			}
			if bytes.Contains(b.body, []byte(f.sandbox)) {
				return fmt.Errorf("beta's feed shows alpha's sandbox: %.300s", b.body)
			}
			if !bytes.Contains(a.body, []byte(f.sandbox)) {
				return fmt.Errorf("control: alpha's own feed does not show alpha's sandbox: %.300s", a.body)
			}
			return nil
		}})
	// The caller's own tenant, its quotas and usage: beta's must be
	// beta's and count nothing of alpha's.
	out = append(out, attempt{id: "cp-tenant-usage", category: "control-plane", family: "cp-tenant-list", stops: "GET /v1/usage answers the tenant of the key that asks, counted by that tenant's objects only",
		control: "alpha's own usage names alpha and counts alpha's running sandbox, snapshot and template",
		desc:    "with tenant beta's key, read GET /v1/usage and look for tenant alpha's name and alpha's sandbox, snapshot and template in its counts",
		run: func(t *testing.T) error {
			type usage struct {
				ID    string
				Usage struct{ Sandboxes, Snapshots, Templates int }
			}
			read := func(key string) (usage, []byte, error) {
				var u usage
				st, b, err := f.as(key, "GET", "/v1/usage", nil)
				if err == nil && st != 200 {
					err = fmt.Errorf("%d %.200s", st, b)
				}
				if err == nil {
					err = json.Unmarshal(b, &u)
				}
				return u, b, err
			}
			beta, b, err := read(f.betaKey)
			if err != nil {
				return fmt.Errorf("beta's usage: %v", err)
			}
			if beta.ID != f.betaTenant {
				return fmt.Errorf("beta's usage is of tenant %q: %.300s", beta.ID, b)
			}
			// Beta holds nothing of these: every create of its attempts
			// is refused.
			if u := beta.Usage; u.Sandboxes != 0 || u.Snapshots != 0 || u.Templates != 0 {
				return fmt.Errorf("beta's usage counts objects beta does not have (alpha's?): %.300s", b)
			}
			for _, s := range f.alphaStrings {
				if bytes.Contains(b, []byte(s)) {
					return fmt.Errorf("beta's usage names alpha's %q: %.300s", s, b)
				}
			}
			alpha, b, err := read(f.alphaKey)
			if err != nil || alpha.ID != f.alphaTenant || alpha.Usage.Sandboxes < 1 || alpha.Usage.Snapshots < 1 || alpha.Usage.Templates < 1 {
				return fmt.Errorf("control: alpha's own usage: %.300s %v", b, err)
			}
			return nil
		}})
	// The metrics name every tenant: a tenant's key gets none of them.
	out = append(out, attempt{id: "cp-tenant-metrics", category: "control-plane", family: "cp-tenant-list", stops: "GET /metrics takes the admin key (or the metrics token) only: a tenant's key is 403",
		control: "the admin key's scrape names tenant alpha",
		desc:    "with tenant beta's key, scrape GET /metrics and look for tenant alpha's name (space_tenant_* series carry every tenant's)",
		run: func(t *testing.T) error {
			st, b, err := f.as(f.betaKey, "GET", "/metrics", nil)
			if err != nil {
				return err
			}
			if st != http.StatusForbidden {
				return fmt.Errorf("beta's scrape answers %d, not 403: %.300s", st, b)
			}
			for _, s := range f.alphaStrings {
				if bytes.Contains(b, []byte(s)) {
					return fmt.Errorf("beta's scrape names alpha's %q: %.300s", s, b)
				}
			}
			st, b, err = f.as(f.d.APIKey, "GET", "/metrics", nil)
			if err != nil || st != 200 || !bytes.Contains(b, []byte(`tenant="`+f.alphaTenant+`"`)) {
				return fmt.Errorf("control: the admin key's scrape: %d %v, names alpha: %v", st, err, bytes.Contains(b, []byte(f.alphaTenant)))
			}
			return nil
		}})
	// Creates whose bodies name another tenant's objects.
	for _, c := range []struct{ id, path, body, what string }{
		{"template", "/v1/sandboxes", `{"template":%q}`, "template"},
		{"snapshot", "/v1/sandboxes", `{"snapshot":%q}`, "snapshot"},
		{"volume", "/v1/sandboxes", `{"volumes":[{"name":%q,"path":"/mnt/v"}]}`, "volume"},
		{"secret", "/v1/sandboxes", `{"secrets":{"TOKEN":%q}}`, "secret"},
		{"customer-key", "/v1/sandboxes", `{"key_id":%q}`, "customer key"},
		{"backup", "/v1/volumes", `{"name":"rt-beta-vol","from_backup":%q}`, "volume backup"},
		{"build-from", "/v1/builds", `{"name":"rt-beta-tpl","from":{"template":%q},"steps":[{"env":{"A":"1"}}]}`, "template"},
		{"e2b-template", "/sandboxes", `{"templateID":%q,"timeout":60}`, "template"},
		{"e2b-volume", "/sandboxes", `{"templateID":"base","timeout":60,"volumeMounts":[{"name":%q,"path":"/mnt/v"}]}`, "volume"},
	} {
		out = append(out, attempt{id: "cp-tenant-create-" + c.id, category: "control-plane", family: "cp-tenant-create", stops: stops,
			control: "alpha's own create with the same body works",
			desc:    "with tenant beta's key, create with tenant alpha's " + c.what + " named in the body (POST " + c.path + "): it must answer as for an unknown one",
			run: func(t *testing.T) error {
				obj := map[string]string{"template": f.template, "snapshot": f.snapshot, "volume": f.volumeName, "secret": f.secret,
					"customer-key": f.customerKey, "backup": f.backup, "build-from": f.template, "e2b-template": f.template, "e2b-volume": f.volumeName}[c.id]
				unknown := unknownLike(obj)
				got := ask(f.as(f.betaKey, "POST", c.path, fmt.Appendf(nil, c.body, obj)))
				want := ask(f.as(f.betaKey, "POST", c.path, fmt.Appendf(nil, c.body, unknown)))
				if err := sameAnswer(got, want, obj, unknown); err != nil {
					return err
				}
				if got.status < 400 {
					return fmt.Errorf("beta's create with alpha's %s was made: %d %.200s", c.what, got.status, got.body)
				}
				// The positive control, where it makes nothing lasting.
				if c.id == "template" || c.id == "secret" {
					own := ask(f.as(f.alphaKey, "POST", c.path, fmt.Appendf(nil, c.body, obj)))
					if own.err != nil || own.status >= 300 {
						return fmt.Errorf("control: alpha's own create answers %d %.200s (%v)", own.status, own.body, own.err)
					}
					var sb struct{ ID string }
					json.Unmarshal(own.body, &sb)
					f.as(f.alphaKey, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
				}
				return nil
			}})
	}
	// Lists show another tenant nothing.
	for _, l := range []string{"/v1/sandboxes", "/v1/snapshots", "/v1/volumes", "/v1/volume-backups", "/v1/templates",
		"/v1/builds", "/v1/secrets", "/v1/keys", "/sandboxes", "/v2/sandboxes", "/snapshots", "/volumes", "/templates",
		"/sandboxes/metrics?sandbox_ids=SANDBOX", "/events/webhooks"} {
		out = append(out, attempt{id: "cp-tenant-list-" + strings.Trim(strings.NewReplacer("/", "-", "?", "-", "=", "-", ",", "-").Replace(l), "-"),
			category: "control-plane", family: "cp-tenant-list", stops: "every list filters by the caller's tenant",
			control: "alpha's own list shows alpha's object",
			desc:    "with tenant beta's key, list GET " + l + " and look for tenant alpha's objects",
			run: func(t *testing.T) error {
				u := strings.ReplaceAll(l, "SANDBOX", f.sandbox)
				needles := f.alphaStrings
				if l == "/v1/builds" {
					// Beta's own failed build names alpha's template in
					// its error (beta's input, echoed): look for the build.
					needles = []string{f.build}
				}
				st, b, err := f.as(f.betaKey, "GET", u, nil)
				if err != nil || st != 200 {
					return fmt.Errorf("beta's list: %d %.200s %v", st, b, err)
				}
				for _, s := range needles {
					if bytes.Contains(b, []byte(s)) {
						return fmt.Errorf("beta's list shows alpha's %q: %.300s", s, b)
					}
				}
				// The control: alpha's own list shows alpha's objects (a
				// sandbox's first metrics sample takes an interval).
				var last []byte
				if harness.WaitFor(20*time.Second, func() bool {
					st, b, err := f.as(f.alphaKey, "GET", u, nil)
					last = b
					if err != nil || st != 200 {
						return false
					}
					for _, s := range needles {
						if bytes.Contains(b, []byte(s)) {
							return true
						}
					}
					return false
				}) {
					return nil
				}
				return fmt.Errorf("control: alpha's own list shows none of alpha's objects: %.300s", last)
			}})
	}
	return out
}

// newTenantFixture makes tenants alpha and beta with a key each, and
// alpha's objects: a running sandbox, a snapshot of it, a volume with a
// backup, a template and its build, a secret, a customer key and a file
// set.
func newTenantFixture(t *testing.T, d *harness.Daemon) *tenantFixture {
	ctx := harness.Ctx(t, 3*time.Minute)
	suffix := harness.RandHex(4)
	f := &tenantFixture{d: d, secret: "rt-secret-" + suffix, customerKey: "rt-ck-" + suffix}
	for _, tn := range []string{"alpha-" + suffix, "beta-" + suffix} {
		if _, err := d.Client.CreateTenant(ctx, tn, "", client.Quotas{}); err != nil {
			t.Fatal(err)
		}
		k, err := d.Client.IssueKey(ctx, tn, "red team")
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(tn, "alpha") {
			f.alphaKey, f.alphaTenant = k.Key, tn
		} else {
			f.betaKey, f.betaTenant = k.Key, tn
		}
	}
	must := func(what string) func(int, []byte, error) []byte {
		return func(status int, body []byte, err error) []byte {
			t.Helper()
			if err != nil || status >= 300 {
				t.Fatalf("alpha's %s: %d %.300s %v", what, status, body, err)
			}
			return body
		}
	}
	id := func(b []byte) string {
		var v struct{ ID string }
		json.Unmarshal(b, &v)
		return v.ID
	}
	f.sandbox = id(must("sandbox")(f.as(f.alphaKey, "POST", "/v1/sandboxes", []byte(`{"timeout_seconds":1800}`))))
	f.snapshot = id(must("snapshot")(f.as(f.alphaKey, "POST", "/v1/sandboxes/"+f.sandbox+"/snapshots", []byte(`{}`))))
	f.volumeName = "rt-vol-" + suffix
	f.volumeID = id(must("volume")(f.as(f.alphaKey, "POST", "/v1/volumes", fmt.Appendf(nil, `{"name":%q,"size_mb":16}`, f.volumeName))))
	f.backup = id(must("backup")(f.as(f.alphaKey, "POST", "/v1/volumes/"+f.volumeName+"/backups", nil)))
	f.template = "rt-tpl-" + suffix
	f.build = id(must("build")(f.as(f.alphaKey, "POST", "/v1/builds", fmt.Appendf(nil, `{"name":%q,"from":{"template":"base"},"steps":[{"env":{"ALPHA":"1"}}]}`, f.template))))
	if !harness.WaitFor(2*time.Minute, func() bool {
		_, b, _ := f.as(f.alphaKey, "GET", "/v1/builds/"+f.build, nil)
		return bytes.Contains(b, []byte(`"state":"ready"`))
	}) {
		_, b, _ := f.as(f.alphaKey, "GET", "/v1/builds/"+f.build, nil)
		t.Fatalf("alpha's build did not get ready: %.500s", b)
	}
	must("secret")(f.as(f.alphaKey, "PUT", "/v1/secrets/"+f.secret, []byte(`{"value":"alpha-secret-value","host":"alpha.example"}`)))
	key := make([]byte, 32)
	rand.Read(key)
	must("customer key")(f.as(f.alphaKey, "PUT", "/v1/keys/"+f.customerKey, fmt.Appendf(nil, `{"key":%q}`, base64.StdEncoding.EncodeToString(key))))
	content := []byte("alpha's files " + suffix)
	sum := sha256.Sum256(content)
	f.files = hex.EncodeToString(sum[:])
	must("file set")(f.as(f.alphaKey, "PUT", "/v1/files/"+f.files, content))
	// A name that never resolves (.invalid): registration takes it, and
	// its deliveries fail quietly.
	f.webhook = id(must("webhook")(f.as(f.alphaKey, "POST", "/events/webhooks",
		[]byte(`{"name":"rt-hook","url":"http://rt-hook.invalid/alpha","signatureSecret":"alpha-hook-secret"}`))))
	f.alphaStrings = []string{f.alphaTenant, f.sandbox, f.snapshot, f.volumeID, f.volumeName, f.backup, f.template, f.build, f.secret, f.customerKey, f.webhook}
	return f
}

// intact checks, with alpha's key, that alpha's objects came through.
func (f *tenantFixture) intact(t *testing.T) {
	for _, c := range []struct{ what, path, want string }{
		{"sandbox", "/v1/sandboxes/" + f.sandbox, `"state":"running"`},
		{"snapshot", "/v1/snapshots/" + f.snapshot, f.snapshot},
		{"volume", "/v1/volumes/" + f.volumeName, f.volumeID},
		{"backup", "/v1/volume-backups/" + f.backup, f.backup},
		{"template", "/v1/templates/" + f.template, f.template},
		{"build", "/v1/builds/" + f.build, `"state":"ready"`},
		{"secret", "/v1/secrets", `"name":"` + f.secret + `"`},
		{"secret's host", "/v1/secrets", `"host":"alpha.example"`},
		{"customer key", "/v1/keys", `"id":"` + f.customerKey + `"`},
		{"file set", "/v1/files/" + f.files, `"present":true`},
		{"webhook", "/events/webhooks/" + f.webhook, `"url":"http://rt-hook.invalid/alpha"`},
	} {
		st, b, err := f.as(f.alphaKey, "GET", c.path, nil)
		if err != nil || st != 200 || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("alpha's %s after the attempts: %d %.300s %v (want %s)", c.what, st, b, err, c.want)
		}
	}
	// The secret is alpha's first version: beta's PUT of the same name
	// made beta's own.
	if _, b, _ := f.as(f.alphaKey, "GET", "/v1/secrets", nil); !bytes.Contains(b, []byte(`"version":1`)) {
		t.Errorf("alpha's secret changed version: %.300s", b)
	}
}

func TestCrossTenant(t *testing.T) {
	d := need(t)
	t.Parallel()
	f := newTenantFixture(t, d)
	for _, a := range tenantAttempts(t, f) {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
			}
		})
	}
	f.intact(t)
	// The admin key sees alpha's objects (it is the operator's).
	if st, b, err := f.as(d.APIKey, "GET", "/v1/sandboxes/"+f.sandbox, nil); err != nil || st != http.StatusOK {
		t.Errorf("the admin key on alpha's sandbox: %d %.200s %v", st, b, err)
	}
	f.as(f.alphaKey, "DELETE", "/v1/sandboxes/"+f.sandbox, nil)
	guard(t, d)
}
