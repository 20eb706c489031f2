package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/fakeruntime"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
)

// The service under test runs on fakes that need no root: a network that
// makes nothing (fakeNet), the in-memory runtime, and for each running
// sandbox an agent stand-in (fakeAgent) listening on the sandbox's address.
//
// The seam for reaching the agent is the address plan itself: the tests'
// sandbox range is a /24 inside 127.0.0.0/8, every address of which is the
// host's loopback on Linux, so the service dials <sandbox ip>:49983 exactly
// as it does in production, and the stand-in, started by the fake
// runtime's Boot hook, listens there. Nothing in the service changed for it.

// fakeNet is a Network that records attachments instead of making them.
type fakeNet struct {
	mu       sync.Mutex
	attached map[string]network.Endpoint // by netns path
	// failAttach, when set, is asked before each Attach.
	failAttach func(ep network.Endpoint) error
	// beforeDetach, when set, runs before each Detach (outside the lock,
	// so it may block while others attach); failDetach fails it.
	beforeDetach func(ep network.Endpoint)
	failDetach   func(ep network.Endpoint) error
	detached     int
}

func (n *fakeNet) Attach(ep network.Endpoint) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failAttach != nil {
		if err := n.failAttach(ep); err != nil {
			return err
		}
	}
	for _, o := range n.attached {
		if o.HostIP == ep.HostIP {
			return fmt.Errorf("%s: %w", ep.HostIP, network.ErrRangeInUse)
		}
	}
	if _, ok := n.attached[ep.NetnsPath]; ok {
		return fmt.Errorf("netns %s exists", ep.NetnsPath)
	}
	n.attached[ep.NetnsPath] = ep
	return nil
}

func (n *fakeNet) Detach(ep network.Endpoint) error {
	n.mu.Lock()
	before, fail := n.beforeDetach, n.failDetach
	n.mu.Unlock()
	if before != nil {
		before(ep)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if fail != nil {
		if err := fail(ep); err != nil {
			return err
		}
	}
	delete(n.attached, ep.NetnsPath)
	n.detached++
	return nil
}

func (n *fakeNet) endpoint(netns string) (network.Endpoint, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep, ok := n.attached[netns]
	return ep, ok
}

func (n *fakeNet) ids() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for p := range n.attached {
		out = append(out, strings.TrimPrefix(filepath.Base(p), "space-"))
	}
	return out
}

// fakeAgent answers /health and Agent.Init as space-agent does: every
// request but /health must carry the current token, and Init replaces it.
type fakeAgent struct {
	agentv1connect.UnimplementedAgentHandler
	mu    sync.Mutex
	token string
	inits []*agentv1.InitRequest
	// failInit, when set, fails every Init.
	failInit error
	srv      *http.Server
	// onToken is told each token Init gives it.
	onToken func(string)
}

func (a *fakeAgent) Init(_ context.Context, req *connect.Request[agentv1.InitRequest]) (*connect.Response[agentv1.InitResponse], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failInit != nil {
		return nil, connect.NewError(connect.CodeInternal, a.failInit)
	}
	a.inits = append(a.inits, req.Msg)
	if req.Msg.AccessToken != "" {
		a.token = req.Msg.AccessToken
		if a.onToken != nil {
			a.onToken(a.token)
		}
	}
	return connect.NewResponse(&agentv1.InitResponse{}), nil
}

func (a *fakeAgent) handler() http.Handler {
	mux := http.NewServeMux()
	path, h := agentv1connect.NewAgentHandler(a)
	mux.Handle(path, h)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			a.mu.Lock()
			ok := r.Header.Get("X-Access-Token") == a.token
			a.mu.Unlock()
			if !ok {
				http.Error(w, "bad token", http.StatusUnauthorized)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// world is one service over the fakes.
type world struct {
	t      *testing.T
	svc    *Service
	st     *failingStore
	rt     *fakeruntime.Runtime
	net    *fakeNet
	plan   network.Plan
	images string
	root   string
	blobs  *failingBlobs

	mu     sync.Mutex
	agents map[string]*fakeAgent
	// tokens is the last token each sandbox's agent was given: what a
	// restore of its checkpoint answers to.
	tokens map[string]string
	// bootFails, when set, fails the Boot hook (the agent never starts).
	bootFails func(id string) error
	// initFails, when set, is what agents started from now on answer
	// every Init with.
	initFails error
}

type worldOptions struct {
	pool        *PoolConfig
	checkpoints bool
	quotas      func(tenant string) store.Quotas
	// templates, when set, resolves templates instead of fakeTemplates.
	templates Templates
}

// testCIDR is a /24 of loopback addresses for one test.
// worldRanges counts the /24s handed out, from a random start: each world
// gets one no other world of the process had (random picks collided in
// CI, a fork's agent finding its address still bound by an earlier test's).
var worldRanges = atomic.Uint32{}

func init() { worldRanges.Store(rand.Uint32N(150 << 8)) }

func testCIDR() netip.Prefix {
	n := worldRanges.Add(1) % (150 << 8)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(100 + n>>8), byte(n), 0}), 24)
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	dir := t.TempDir()
	bolt, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	w := &world{
		t: t, st: &failingStore{Sandboxes: bolt}, net: &fakeNet{attached: map[string]network.Endpoint{}},
		plan: network.Plan{CIDR: testCIDR()}, root: t.TempDir(), images: filepath.Join(dir, "images"),
		agents: map[string]*fakeAgent{}, tokens: map[string]string{},
	}
	w.rt = fakeruntime.New(fakeruntime.Options{Boot: w.boot})
	// Registered first, so it runs after the service's Close: sandboxes
	// left running would hold their addresses for the package's life.
	t.Cleanup(w.stopAgents)
	w.svc = w.newService(o, w.rt)
	t.Cleanup(func() { w.svc.Close() })
	return w
}

// stopAgents closes every agent stand-in still listening.
func (w *world) stopAgents() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.agents {
		a.srv.Close()
	}
}

func (w *world) newService(o worldOptions, rt runtime.Runtime) *Service {
	cfg := Config{
		Templates:      fakeTemplates{root: w.root},
		DefaultTimeout: time.Minute, MaxTimeout: time.Hour,
		Defaults:         runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 256, MaxProcs: 256},
		Network:          w.plan,
		Links:            w.net,
		AgentBootTimeout: 5 * time.Second,
		ImagesDir:        w.images,
	}
	if o.pool != nil {
		cfg.Pools = []PoolConfig{*o.pool}
	}
	if o.templates != nil {
		cfg.Templates = o.templates
	}
	cfg.Quotas = o.quotas
	if o.checkpoints {
		fs, err := blobstore.NewFS(filepath.Join(w.t.TempDir(), "objects"))
		if err != nil {
			w.t.Fatal(err)
		}
		keys, err := seal.OpenKeyring(filepath.Join(w.t.TempDir(), "platform.json"))
		if err != nil {
			w.t.Fatal(err)
		}
		w.blobs = &failingBlobs{Store: fs}
		cfg.Checkpoints, cfg.Keys = checkpoint.NewRepo(w.blobs, keys), keys
	}
	return New(cfg, w.st, rt, nil)
}

// restart is a new service over the same store, runtime and network, as
// spaced started again after a crash (the old one is dropped, not closed).
func (w *world) restart(o worldOptions) *Service {
	w.svc = w.newService(o, w.rt.Reopen(fakeruntime.Options{Boot: w.boot}))
	w.t.Cleanup(func() { w.svc.Close() })
	if err := w.svc.Recover(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	return w.svc
}

// boot starts an agent stand-in on the sandbox's address.
func (w *world) boot(b fakeruntime.Boot) (func(), error) {
	if w.bootFails != nil {
		if err := w.bootFails(b.Spec.ID); errors.Is(err, errNoAgent) {
			return func() {}, nil // running, but nothing listens
		} else if err != nil {
			return nil, err
		}
	}
	ep, ok := w.net.endpoint(b.Spec.Netns)
	if !ok {
		return nil, fmt.Errorf("no network attached at %s", b.Spec.Netns)
	}
	env := b.Spec.Env
	if b.From != nil {
		env = b.From.Env
	}
	id := b.Spec.ID
	a := &fakeAgent{onToken: func(tok string) { w.mu.Lock(); w.tokens[id] = tok; w.mu.Unlock() }}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SPACE_AGENT_TOKEN="); ok {
			a.token = v
		}
	}
	w.mu.Lock()
	a.failInit = w.initFails
	if b.From != nil {
		if tok, ok := w.tokens[b.From.ID]; ok {
			// A restored agent holds what the checkpointed one held.
			a.token = tok
		}
	}
	w.mu.Unlock()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ep.SandboxIP, AgentPort).String())
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: a.handler()}
	a.srv = srv
	go srv.Serve(ln)
	w.mu.Lock()
	w.agents[b.Spec.ID] = a
	w.mu.Unlock()
	return func() {
		srv.Close()
		w.mu.Lock()
		if w.agents[b.Spec.ID] == a {
			delete(w.agents, b.Spec.ID)
		}
		w.mu.Unlock()
	}, nil
}

// agentDown stops sandbox id's agent; the sandbox runs on.
func (w *world) agentDown(id string) {
	if a := w.agent(id); a != nil {
		a.srv.Close()
	}
}

// filepathGlob lists what dir holds.
func filepathGlob(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "*"))
}

func (w *world) agent(id string) *fakeAgent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agents[id]
}

// accounted checks that what the host holds is exactly the live
// sandboxes: runtime sandboxes, network attachments, running agents and
// live records (with their slots) all name the same ids.
func (w *world) accounted(want ...string) {
	w.t.Helper()
	w.svc.background.Wait()      // teardowns of pool sandboxes given up
	w.svc.ckpts.teardowns.Wait() // teardowns of paused sandboxes
	ctx := context.Background()
	ids, err := w.rt.List(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	recs, err := w.st.ListSandboxes(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	var live []string
	for _, r := range recs {
		if r.Live() {
			live = append(live, r.ID)
		}
	}
	w.mu.Lock()
	var agents []string
	for id := range w.agents {
		agents = append(agents, id)
	}
	w.mu.Unlock()
	for what, got := range map[string][]string{"runtime": ids, "network": w.net.ids(), "agents": agents, "live records": live} {
		if !sameSet(got, want) {
			w.t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	if n := w.svc.Running() + w.svc.Pools().PoolSizes()["base"]; n != len(want) {
		w.t.Errorf("service holds %d sandboxes (live and pooled), want %d", n, len(want))
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		if m[x]--; m[x] < 0 {
			return false
		}
	}
	return true
}

type fakeTemplates struct{ root string }

func (f fakeTemplates) Resolve(_ context.Context, ref string) (*Image, error) {
	return &Image{Template: ref, ID: "img-1", Root: f.root}, nil
}

func (f fakeTemplates) ImageRoot(_, _ string) (string, error) { return f.root, nil }

// failingStore fails UpdateSandbox when fail says so.
type failingStore struct {
	store.Sandboxes
	mu         sync.Mutex
	failUpdate func(rec *store.Sandbox) error
}

func (s *failingStore) UpdateSandbox(ctx context.Context, rec *store.Sandbox, from store.Expect) error {
	s.mu.Lock()
	f := s.failUpdate
	s.mu.Unlock()
	if f != nil {
		if err := f(rec); err != nil {
			return err
		}
	}
	return s.Sandboxes.UpdateSandbox(ctx, rec, from)
}

func (s *failingStore) setFailUpdate(f func(rec *store.Sandbox) error) {
	s.mu.Lock()
	s.failUpdate = f
	s.mu.Unlock()
}

// failingBlobs fails Put when failPut is set.
type failingBlobs struct {
	blobstore.Store
	mu      sync.Mutex
	failPut error
}

func (b *failingBlobs) Put(ctx context.Context, key string, r io.Reader, size int64) (blobstore.Info, error) {
	b.mu.Lock()
	err := b.failPut
	b.mu.Unlock()
	if err != nil {
		return blobstore.Info{}, err
	}
	return b.Store.Put(ctx, key, r, size)
}

// hideArtifact moves the stored objects of every checkpoint whose key
// ends with name out of the way, under a key no checkpoint reads.
func (w *world) hideArtifact(name string) {
	w.t.Helper()
	for _, key := range w.blobs.keys(w.t) {
		if !strings.HasSuffix(key, "/"+name) {
			continue
		}
		moveObject(w.t, w.blobs.Store, key, "hidden/"+key)
	}
}

// unhideArtifacts puts back what hideArtifact moved.
func (w *world) unhideArtifacts() {
	w.t.Helper()
	for _, key := range w.blobs.keys(w.t) {
		if orig, ok := strings.CutPrefix(key, "hidden/"); ok {
			moveObject(w.t, w.blobs.Store, key, orig)
		}
	}
}

func moveObject(t *testing.T, st blobstore.Store, from, to string) {
	t.Helper()
	ctx := context.Background()
	r, info, err := st.Get(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := st.Put(ctx, to, r, info.Size); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, from); err != nil {
		t.Fatal(err)
	}
}

// Delete fails on an ended context, as a store across a network does.
func (b *failingBlobs) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.Store.Delete(ctx, key)
}

func (b *failingBlobs) keys(t *testing.T) []string {
	infos, err := b.Store.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Key)
	}
	return out
}

var errInjected = errors.New("injected failure")

// errNoAgent from bootFails: the sandbox runs, its agent never listens.
var errNoAgent = errors.New("no agent")

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
