package interpreter

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// authServer is a server with auth on: the sandbox's token is "one".
func authServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(state, []byte(`{"token":"one"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.StatePath = state
	return startServer(t, cfg)
}

// as makes a request with token ("": none) and returns the status and
// body.
func (s *testServer) as(t *testing.T, token, method, path string, body any) (int, string) {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("X-Access-Token", token)
	}
	resp, err := s.do(context.Background(), method, path, body, h)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// createAs creates a python context with token and returns its id.
func (s *testServer) createAs(t *testing.T, token string) string {
	t.Helper()
	status, body := s.as(t, token, "POST", "/contexts", map[string]any{})
	if status != http.StatusOK {
		t.Fatalf("create a context with token %q: %d %s", token, status, body)
	}
	var c struct{ ID string }
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.ID == "" {
		t.Fatalf("create: %q: %v", body, err)
	}
	return c.ID
}

func (s *testServer) listAs(t *testing.T, token string) []string {
	t.Helper()
	status, body := s.as(t, token, "GET", "/contexts", nil)
	if status != http.StatusOK {
		t.Fatalf("list with token %q: %d %s", token, status, body)
	}
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("list: %q: %v", body, err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids
}

// A request to /contexts without a token (the SDKs' context calls on a
// public sandbox) sees and acts only on contexts made the same way; the
// default context and those made with the token are unknown to it.
func TestContextAccess(t *testing.T) {
	s := authServer(t, Config{MaxContexts: 8, MaxAnonymousContexts: 4})
	def, js := s.defaults["python"].ID, s.defaults["javascript"].ID
	owned := s.createAs(t, "one")
	anon := s.createAs(t, "")

	if got := s.listAs(t, ""); !slices.Equal(got, []string{anon}) {
		t.Errorf("anonymous list %v, want only %s", got, anon)
	}
	all := s.listAs(t, "one")
	for _, id := range []string{def, js, owned, anon} { // both default contexts from the start, as E2B's
		if !slices.Contains(all, id) {
			t.Errorf("the owner's list %v lacks %s", all, id)
		}
	}

	for _, tc := range []struct {
		name, token, method, path string
		want                      int
	}{
		{"anonymous restarts the default", "", "POST", "/contexts/" + def + "/restart", http.StatusNotFound},
		{"anonymous deletes the default", "", "DELETE", "/contexts/" + def, http.StatusNotFound},
		{"anonymous deletes javascript's default", "", "DELETE", "/contexts/" + js, http.StatusNotFound},
		{"anonymous restarts an owned one", "", "POST", "/contexts/" + owned + "/restart", http.StatusNotFound},
		{"anonymous deletes an owned one", "", "DELETE", "/contexts/" + owned, http.StatusNotFound},
		{"wrong token lists", "two", "GET", "/contexts", http.StatusUnauthorized},
		{"wrong token creates", "two", "POST", "/contexts", http.StatusUnauthorized},
		{"wrong token deletes an anonymous one", "two", "DELETE", "/contexts/" + anon, http.StatusUnauthorized},
		// Positive controls: what each may do.
		{"anonymous restarts its own", "", "POST", "/contexts/" + anon + "/restart", http.StatusOK},
		{"owner restarts an owned one", "one", "POST", "/contexts/" + owned + "/restart", http.StatusOK},
		{"owner restarts an anonymous one", "one", "POST", "/contexts/" + anon + "/restart", http.StatusOK},
	} {
		if status, body := s.as(t, tc.token, tc.method, tc.path, nil); status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.want)
		}
	}
	// The refusals changed nothing: every context is still there.
	all = s.listAs(t, "one")
	for _, id := range []string{def, owned, anon} {
		if !slices.Contains(all, id) {
			t.Errorf("after the refusals the owner's list %v lacks %s", all, id)
		}
	}
	if status, body := s.as(t, "", "DELETE", "/contexts/"+anon, nil); status != http.StatusOK {
		t.Errorf("anonymous deletes its own: %d %s", status, body)
	}
	if status, body := s.as(t, "one", "DELETE", "/contexts/"+owned, nil); status != http.StatusOK {
		t.Errorf("owner deletes an owned one: %d %s", status, body)
	}
	want := []string{def, js}
	slices.Sort(want) // the list is sorted by id
	if got := s.listAs(t, "one"); !slices.Equal(got, want) {
		t.Errorf("after the deletes: %v, want only the default ones %v", got, want)
	}
}

// RequireContextToken closes /contexts to requests without a token.
func TestRequireContextToken(t *testing.T) {
	s := authServer(t, Config{RequireContextToken: true})
	for _, tc := range []struct{ method, path string }{
		{"GET", "/contexts"}, {"POST", "/contexts"},
		{"POST", "/contexts/" + s.defaults["python"].ID + "/restart"},
	} {
		if status, body := s.as(t, "", tc.method, tc.path, map[string]any{}); status != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d %s, want 401", tc.method, tc.path, status, body)
		}
	}
	s.createAs(t, "one") // the positive control
}

// wantCapError checks a refusal by a cap: a 429 whose JSON body says
// which.
func wantCapError(t *testing.T, what string, status int, body, mentions string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if status != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &e) != nil ||
		e.Error.Code != "resource_exhausted" || !strings.Contains(e.Error.Message, mentions) {
		t.Errorf("%s: %d %s, want a 429 resource_exhausted error that mentions %q", what, status, body, mentions)
	}
}

func TestContextCaps(t *testing.T) {
	// The default contexts (Python's, JavaScript's) and two more; one of
	// them without a token.
	s := authServer(t, Config{MaxContexts: 4, MaxAnonymousContexts: 1})
	anon := s.createAs(t, "")
	status, body := s.as(t, "", "POST", "/contexts", map[string]any{})
	wantCapError(t, "a second anonymous context", status, body, "without an access token")

	owned := s.createAs(t, "one") // the owner still has room
	status, body = s.as(t, "one", "POST", "/contexts", map[string]any{})
	wantCapError(t, "a fifth context", status, body, "4 contexts")
	// A language's default context counts too.
	status, body = s.as(t, "one", "POST", "/execute", map[string]any{"code": "echo", "language": "bash"})
	wantCapError(t, "bash's default context past the cap", status, body, "4 contexts")
	if got := s.listAs(t, "one"); len(got) != 4 {
		t.Errorf("the refusals changed the contexts: %v", got)
	}

	// Room again once one goes.
	if status, body := s.as(t, "", "DELETE", "/contexts/"+anon, nil); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, body)
	}
	s.createAs(t, "")
	if status, body := s.as(t, "one", "DELETE", "/contexts/"+owned, nil); status != http.StatusOK {
		t.Fatalf("delete: %d %s", status, body)
	}
	s.createAs(t, "one")
}

// Creates that race each other cannot pass the cap: a context's place is
// held while its kernel starts.
func TestContextCapConcurrent(t *testing.T) {
	s := startServer(t, Config{MaxContexts: 4}) // the two default ones and two
	const n = 4
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = s.as(t, "", "POST", "/contexts", map[string]any{})
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, st := range statuses {
		switch st {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
		}
	}
	if ok != 2 || refused != 2 {
		t.Errorf("%d creates at once under room for 2: %v", n, statuses)
	}
	if got := s.listAs(t, ""); len(got) != 4 {
		t.Errorf("contexts after the race: %v", got)
	}
}

func TestContextLimits(t *testing.T) {
	for _, tc := range []struct {
		total          uint64
		all, anonymous int
	}{
		{0, 8, 4},
		{256 << 20, 4, 1},
		{512 << 20, 4, 1},
		{1 << 30, 8, 2},
		{2 << 30, 16, 5},
		{64 << 30, 64, 32},
	} {
		all, anonymous := ContextLimits(tc.total)
		if all != tc.all || anonymous != tc.anonymous {
			t.Errorf("ContextLimits(%d MiB) = %d, %d; want %d, %d", tc.total>>20, all, anonymous, tc.all, tc.anonymous)
		}
	}
}
