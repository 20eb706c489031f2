package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// keys is Idempotency in memory.
type keys struct {
	mu sync.Mutex
	m  map[string]*store.Stored // nil value: claimed, running
}

func (k *keys) ClaimIdempotency(_ context.Context, scope string) (bool, *store.Stored, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.m[scope]
	if !ok {
		k.m[scope] = nil
		return true, nil, nil
	}
	return false, s, nil
}

func (k *keys) FinishIdempotency(_ context.Context, scope string, s *store.Stored) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s == nil {
		delete(k.m, scope)
	} else {
		k.m[scope] = s
	}
	return nil
}

// placeNode is a node whose handler creates (counting them) or refuses.
type placeNode struct {
	srv     *httptest.Server
	created atomic.Int32
	full    atomic.Bool
}

func TestPlacement(t *testing.T) {
	src := newRoutes()
	router := NewRouter(src, Hooks{}, nil)
	idem := &keys{m: map[string]*store.Stored{}}
	nodes := map[string]*placeNode{}
	for _, name := range []string{"a", "b", "c"} {
		n := &placeNode{}
		fwd := NewForwarder(ForwarderConfig{Self: name, Router: router, Secret: []byte("k"), SandboxOf: sandboxOf,
			IsCreate:    func(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/v1/sandboxes" },
			TemplateOf:  func(_ *http.Request, body []byte) string { return strings.TrimSpace(string(body)) },
			Idempotency: idem,
			Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.full.Load() {
					writeError(w, http.StatusServiceUnavailable, "node_at_capacity", "full")
					return
				}
				n.created.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"node":"`+name+`"}`)
			})})
		n.srv = httptest.NewServer(fwd)
		t.Cleanup(n.srv.Close)
		nodes[name] = n
	}
	member := func(id string, sandboxes int, pools map[string]int) store.Member {
		return store.Member{ID: id, Address: nodes[id].srv.URL, Alive: true, Info: store.NodeInfo{Sandboxes: sandboxes, Capacity: 100, Pools: pools}}
	}
	create := func(at, template, key string) (int, string) {
		req, _ := http.NewRequest("POST", nodes[at].srv.URL+"/v1/sandboxes", strings.NewReader(template))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Authorization", "Bearer user")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	setNodes := func(ms ...store.Member) {
		src.mu.Lock()
		src.nodes = ms
		src.mu.Unlock()
	}
	for _, tc := range []struct {
		name    string
		members []store.Member
		full    string
		at      string
		want    string
	}{
		{"equal load: here", []store.Member{member("a", 1, nil), member("b", 0, nil), member("c", 2, nil)}, "", "a", "a"},
		{"a warm sandbox elsewhere", []store.Member{member("a", 0, nil), member("b", 50, map[string]int{"py": 2}), member("c", 0, nil)}, "", "a", "b"},
		{"least loaded", []store.Member{member("a", 60, nil), member("b", 30, nil), member("c", 10, nil)}, "", "a", "c"},
		{"the least loaded is full: the next", []store.Member{member("a", 60, nil), member("b", 30, nil), member("c", 10, nil)}, "c", "a", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setNodes(tc.members...)
			for name, n := range nodes {
				n.full.Store(name == tc.full)
			}
			// Each case asks a fresh forwarder view: wait out the cache.
			waitCache()
			status, body := create(tc.at, "py", "")
			if status != http.StatusCreated || body != `{"node":"`+tc.want+`"}` {
				t.Fatalf("%d %s, want a create on %s", status, body, tc.want)
			}
		})
	}

	// One key, many creates at once, through different nodes: one sandbox.
	setNodes(member("a", 0, nil), member("b", 0, nil), member("c", 0, nil))
	for _, n := range nodes {
		n.full.Store(false)
		n.created.Store(0)
	}
	var wg sync.WaitGroup
	bodies := make([]string, 9)
	for i := range bodies {
		wg.Go(func() {
			status, body := create([]string{"a", "b", "c"}[i%3], "py", "key-1")
			if status != http.StatusCreated {
				t.Errorf("create %d: %d %s", i, status, body)
			}
			bodies[i] = body
		})
	}
	wg.Wait()
	total := nodes["a"].created.Load() + nodes["b"].created.Load() + nodes["c"].created.Load()
	if total != 1 {
		t.Fatalf("%d sandboxes for one Idempotency-Key", total)
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Fatalf("answers differ: %q vs %q", b, bodies[0])
		}
	}
	// Another key makes another.
	if status, _ := create("a", "py", "key-2"); status != http.StatusCreated || nodes["a"].created.Load()+nodes["b"].created.Load()+nodes["c"].created.Load() != 2 {
		t.Fatal("a second key made no sandbox")
	}
}

// waitCache waits out the forwarders' one-second cache of the nodes.
func waitCache() { time.Sleep(1100 * time.Millisecond) }
