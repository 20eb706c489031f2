package e2bcompat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

// auditVolumes has one volume, "vol1" of tenant acme, whose token is
// "vol-token"; what the test does not call is left unimplemented.
type auditVolumes struct{ Volumes }

func (auditVolumes) Token(ctx context.Context, id string) (string, error) {
	if id != "vol1" {
		return "", errdefs.New(errdefs.ErrNotFound, "volume %q not found", id)
	}
	return "vol-token", nil
}

func (auditVolumes) Get(ctx context.Context, id string) (*volume.Volume, error) {
	return &volume.Volume{ID: id, Name: "v", Tenant: "acme"}, nil
}

func (auditVolumes) Write(ctx context.Context, ref, p string, r io.Reader, a volume.Attrs) (*volume.Entry, error) {
	return &volume.Entry{Name: "f", Path: p}, nil
}

func (auditVolumes) Remove(ctx context.Context, ref, p string) error { return nil }

func (auditVolumes) MakeDir(ctx context.Context, ref, p string, parents bool, a volume.Attrs) (*volume.Entry, error) {
	return &volume.Entry{Name: "d", Path: p}, nil
}

func (auditVolumes) SetAttrs(ctx context.Context, ref, p string, a volume.Attrs) (*volume.Entry, error) {
	return &volume.Entry{Name: "f", Path: p}, nil
}

// auditTemplates knows template "tpl" and takes any file set.
type auditTemplates struct{ templatesAPI }

// templatesAPI is Templates under a name that is not one of its methods.
type templatesAPI = Templates

func (auditTemplates) Template(ctx context.Context, name string) (*template.TemplateInfo, error) {
	return &template.TemplateInfo{Name: name}, nil
}

func (auditTemplates) HasFiles(ctx context.Context, hash string) (bool, error) { return false, nil }

func (auditTemplates) PutFiles(ctx context.Context, hash string, body io.Reader, verify bool, max int64) error {
	return nil
}

// TestPublicRoutesAudited: every state-changing route that checks its
// caller itself (a volume's token, a signed upload link) is in the audit
// log, as whom the call ran as, or as anonymous when it was refused. The
// list of routes comes from the router, so a new one cannot be missed.
func TestPublicRoutesAudited(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tenants, err := tenant.New(context.Background(), st, testKey, store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := tenant.NewAudit(st, time.Hour, nil)
	fake := newFakeSandboxes()
	srv := httptest.NewServer(New(Options{Sandboxes: fake, Checkpoints: fake, Snapshots: fake, Targets: fake, Tenants: tenants, Audit: audit,
		Volumes: auditVolumes{}, Templates: auditTemplates{}, Next: http.NotFoundHandler()}))
	t.Cleanup(srv.Close)
	send := func(method, path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("X-API-Key", "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// A signed upload link, as the SDK gets one.
	req, _ := http.NewRequest("GET", srv.URL+"/templates/tpl/files/"+strings.Repeat("a", 64), nil)
	req.Header.Set("X-API-Key", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var link uploadLinkJSON
	json.NewDecoder(resp.Body).Decode(&link)
	resp.Body.Close()
	if link.URL == "" {
		t.Fatalf("no upload link: %d", resp.StatusCode)
	}
	upload := strings.TrimPrefix(link.URL, srv.URL)

	type call struct {
		route, path, auth string
		status            int
		tenant, key       string
	}
	var calls []call
	for _, rt := range (&Server{}).routeTable(true) {
		method, _, _ := strings.Cut(rt.pattern, " ")
		if !rt.public || method == http.MethodGet {
			continue
		}
		switch {
		case strings.Contains(rt.pattern, "/volumecontent/"):
			p := strings.Replace(strings.TrimPrefix(rt.pattern, method+" "), "{id}", "vol1", 1) + "?path=/f"
			calls = append(calls,
				call{rt.pattern, p, "Bearer vol-token", 0, "acme", VolumeTokenKey},
				call{rt.pattern, p, "Bearer wrong", http.StatusUnauthorized, "", tenant.Anonymous})
		case strings.HasSuffix(rt.pattern, "/upload"):
			calls = append(calls,
				call{rt.pattern, upload, "", http.StatusOK, tenant.Default, UploadLinkKey},
				call{rt.pattern, strings.Replace(upload, "signature=", "signature=0", 1), "", http.StatusForbidden, "", tenant.Anonymous})
		default:
			t.Errorf("public route %s changes state and this test does not know how to call it: add it", rt.pattern)
		}
	}
	if len(calls) < 10 {
		t.Fatalf("only %d calls of public routes: the routes are not where this test looks", len(calls))
	}
	from := time.Now().Add(-time.Minute)
	for _, c := range calls {
		if got := send(strings.SplitN(c.route, " ", 2)[0], c.path, c.auth); c.status != 0 && got != c.status || c.status == 0 && got >= 300 {
			t.Fatalf("%s as %s: %d, want %d", c.route, c.key, got, c.status)
		}
	}
	got, err := audit.Query(context.Background(), from, time.Now().Add(time.Minute), "", 1000)
	if err != nil || len(got) != len(calls) {
		t.Fatalf("audit: %d entries (%v), want %d: %+v", len(got), err, len(calls), got)
	}
	for i, c := range calls {
		if e := got[i]; e.Route != c.route || e.Tenant != c.tenant || e.Key != c.key {
			t.Errorf("entry %d: %+v, want route %s, tenant %q, key %s", i, e, c.route, c.tenant, c.key)
		}
	}
}

// routesFile is the list of routes the red-team suite reads.
const routesFile = "../../api/e2b-routes.txt"

// routesText is what routesFile must hold: every route of the table (with
// the template routes), "public" after those that check their callers
// themselves.
func routesText() string {
	var b strings.Builder
	b.WriteString("# The E2B control-plane routes spaced serves (internal/e2bcompat/api.go), one per line;\n" +
		"# \"public\": the route checks its caller itself, not by API key. Kept current by\n" +
		"# internal/e2bcompat's TestRoutesFile (E2B_WRITE_ROUTES=1 rewrites it); the red-team suite\n" +
		"# attacks every route listed.\n")
	for _, rt := range (&Server{}).routeTable(true) {
		b.WriteString(rt.pattern)
		if rt.public {
			b.WriteString(" public")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestRoutesFile: api/e2b-routes.txt lists the router's routes.
func TestRoutesFile(t *testing.T) {
	want := routesText()
	if os.Getenv("E2B_WRITE_ROUTES") != "" {
		if err := os.WriteFile(routesFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(routesFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the router's table: run E2B_WRITE_ROUTES=1 go test -run TestRoutesFile ./internal/e2bcompat/", routesFile)
	}
	if s := &(Server{opts: Options{Templates: auditTemplates{}}}); len(s.table()) != len(s.routeTable(true)) {
		t.Errorf("a server with templates serves %d routes, the file lists %d", len(s.table()), len(s.routeTable(true)))
	}
}
