package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// RouteSource is where routes come from and how they change
// (store.Postgres).
type RouteSource interface {
	RouteOf(ctx context.Context, id string) (node, address string, err error)
	Members(ctx context.Context) ([]store.Member, error)
	Listen(ctx context.Context, ev store.CatalogEvents) error
}

// Hooks hear of the catalog's other changes through the router's
// notification connection.
type Hooks struct {
	// Tenants: a tenant or key changed on some node, or notifications
	// were away (changes may have been missed).
	Tenants func()
	// Migration: sandbox id was paused to move to some node.
	Migration func(id string)
	// Secrets: a secret changed on some node, or notifications were
	// away.
	Secrets func()
	// Missed: notifications were away (the listener is back): look for
	// what they would have said (migrations waiting for this node).
	Missed func()
}

// Route is where a sandbox runs: Node "" when on no node (unknown, paused
// or ended).
type Route struct {
	Node, Address string
}

// Router answers where sandboxes run from a cache that the catalog's
// notifications keep true: a lookup reaches the database only the first
// time an id is asked for after it changed. While the notification
// connection is down nothing is cached (a missed notification cannot
// leave a stale route), and the cache starts empty when it is back.
type Router struct {
	src   RouteSource
	log   *slog.Logger
	hooks Hooks

	mu      sync.Mutex
	routes  map[string]Route
	gen     uint64 // goes up at every change: a lookup that raced one is not cached
	synced  bool   // the listener is in place
	lookups uint64 // database lookups, for tests and metrics
}

// maxRoutes bounds the cache; past it, it starts again empty.
const maxRoutes = 1 << 20

// NewRouter makes a router; Run keeps it in sync.
func NewRouter(src RouteSource, hooks Hooks, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if hooks.Tenants == nil {
		hooks.Tenants = func() {}
	}
	if hooks.Migration == nil {
		hooks.Migration = func(string) {}
	}
	if hooks.Secrets == nil {
		hooks.Secrets = func() {}
	}
	if hooks.Missed == nil {
		hooks.Missed = func() {}
	}
	return &Router{src: src, log: log, hooks: hooks, routes: map[string]Route{}}
}

// Run listens for route changes until ctx ends, reconnecting after a
// failure.
func (r *Router) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.src.Listen(ctx, store.CatalogEvents{
			Ready: func() {
				r.mu.Lock()
				r.routes, r.synced = map[string]Route{}, true
				r.gen++
				r.mu.Unlock()
				r.hooks.Tenants()
				r.hooks.Secrets()
				r.hooks.Missed()
			},
			Route:     r.changed,
			Tenants:   r.hooks.Tenants,
			Migration: r.hooks.Migration,
			Secrets:   r.hooks.Secrets,
			Node:      r.nodeChanged,
		})
		r.mu.Lock()
		r.routes, r.synced = map[string]Route{}, false
		r.gen++
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("route notifications interrupted; routing from the catalog until they are back", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (r *Router) changed(id string) {
	r.mu.Lock()
	delete(r.routes, id)
	r.gen++
	r.mu.Unlock()
}

// nodeChanged drops the routes to node id: it registered again (perhaps
// at another address) or left.
func (r *Router) nodeChanged(id string) {
	r.mu.Lock()
	for sb, rt := range r.routes {
		if rt.Node == id {
			delete(r.routes, sb)
		}
	}
	r.gen++
	r.mu.Unlock()
}

// Lookup answers where sandbox id runs.
func (r *Router) Lookup(ctx context.Context, id string) (Route, error) {
	r.mu.Lock()
	if rt, ok := r.routes[id]; ok {
		r.mu.Unlock()
		return rt, nil
	}
	gen, synced := r.gen, r.synced
	r.lookups++
	r.mu.Unlock()
	node, addr, err := r.src.RouteOf(ctx, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return Route{}, err
	}
	rt := Route{Node: node, Address: addr}
	r.mu.Lock()
	if synced && r.gen == gen {
		if len(r.routes) >= maxRoutes {
			r.routes = map[string]Route{}
		}
		r.routes[id] = rt
	}
	r.mu.Unlock()
	return rt, nil
}

// Lookups is how many lookups reached the catalog.
func (r *Router) Lookups() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

// NodeAddress answers the address of node id (read from the catalog:
// node routes are the admin's, rare).
func (r *Router) NodeAddress(ctx context.Context, id string) (string, error) {
	ms, err := r.src.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.ID == id {
			return m.Address, nil
		}
	}
	return "", errdefs.New(errdefs.ErrNotFound, "no node %q in the cluster", id)
}
