package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spacesandbox/space/internal/cluster"
	"github.com/spacesandbox/space/internal/coderun"
	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/desktop"
	"github.com/spacesandbox/space/internal/e2bcompat"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/httpapi"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/webhook"
)

// apiDeps are what the API layers serve.
type apiDeps struct {
	storage   *storage
	sandboxes *sandboxes
	telemetry *sandbox.Telemetry
	templates *template.Service
	secrets   *secrets.Store
	volumes   *volume.Service
	webhooks  *webhook.Service
	tenants   *tenant.Service
	audit     *tenant.Audit
	// cluster is this node's membership; nil with one node.
	cluster  *clusterMember
	registry *prometheus.Registry
	// denials are the egress denials the console lists.
	denials *console.AuditLog
	log     *slog.Logger
}

// newHandler builds the API layers: the native API and the console, the
// E2B layer in front of both and, in a cluster, the forwarder in front of
// all. The console's part ends its sessions at its stop.
func newHandler(cfg config.Config, d apiDeps) (http.Handler, part, error) {
	svc, log := d.sandboxes.svc, d.log
	// How the API layers reach into running sandboxes: the native API's
	// client of the code interpreters and of the computer-use servers.
	targets := sandbox.NewTargets(svc)
	code := coderun.New(coderun.Options{Target: targets.Target})
	desk := desktop.New(desktop.Options{Target: targets.Target})
	var nodes httpapi.Cluster // nil with one node
	if d.cluster != nil {
		nodes = d.cluster.drainer
	}
	api := httpapi.New(httpapi.Options{
		Logger:    log,
		Sandboxes: svc, Changes: sandbox.NewFeed(d.storage.watched), Checkpoints: svc.Checkpoints(), Snapshots: svc.Snapshots(),
		Keys:     sandbox.NewCustomerKeys(d.storage.keys, d.storage.repos.checkpoints, log),
		Commands: sandbox.NewCommands(targets, d.sandboxes.metrics), Files: sandbox.NewFiles(targets), Templates: d.templates, Secrets: d.secrets,
		Code: code, Desktop: desk, Volumes: d.volumes, Telemetry: d.telemetry,
		Tenants: d.tenants, Audit: d.audit, MaxUpload: cfg.TemplateMaxUpload, Metrics: promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{}),
		MetricsToken: cfg.MetricsToken, Cluster: nodes, Pools: svc.Pools(),
	})
	// The console's calls go through the whole chain, so that in cluster
	// mode one for a sandbox of another node reaches that node as any API
	// call does; the chain holds the console, so it is bound once built
	// (a cycle of handlers, not of parts).
	var top http.Handler
	viaTop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { top.ServeHTTP(w, r) })
	ui, err := console.New(console.Options{API: viaTop, Keys: consoleKeys{d.tenants}, DefaultTenant: tenant.Default, Audit: d.denials, Logger: log})
	if err != nil {
		return nil, part{}, err
	}
	top = e2bcompat.New(e2bcompat.Options{
		Logger:    log,
		Sandboxes: svc, Checkpoints: svc.Checkpoints(), Snapshots: svc.Snapshots(), Targets: targets,
		Templates: d.templates,
		Telemetry: d.telemetry,
		Volumes:   d.volumes,
		Webhooks:  d.webhooks,
		MaxUpload: cfg.TemplateMaxUpload,
		Tenants:   d.tenants,
		Audit:     d.audit,
		// The cluster's forwarder keeps creates' Idempotency-Keys.
		IdempotencyKeys: d.cluster != nil,
		Next:            withConsole(api, ui),
	})
	if d.cluster != nil {
		top = forwarder(cfg, d.cluster, d.storage.cluster, targets, top, log)
	}
	return top, part{name: "console", stop: func(context.Context) error { ui.Close(); return nil }}, nil
}

// forwarder is the cluster's front: any node serves every request, and
// one that names a sandbox (or build) another node runs goes there.
func forwarder(cfg config.Config, c *clusterMember, pg *store.Postgres, targets *sandbox.Targets, next http.Handler, log *slog.Logger) http.Handler {
	return cluster.NewForwarder(cluster.ForwarderConfig{
		Logger: log,
		Self:   cfg.NodeID, Router: c.router, Secret: c.secret, Next: next, Runs: targets.Runs, NodeOf: httpapi.NodeOf,
		IsCreate: func(r *http.Request) bool { return httpapi.IsCreate(r) || e2bcompat.IsCreate(r) },
		TemplateOf: func(r *http.Request, body []byte) string {
			if httpapi.IsCreate(r) {
				return httpapi.CreateTemplate(body)
			}
			return e2bcompat.CreateTemplate(body)
		},
		Idempotency: pg,
		Builds:      pg,
		BuildOf: func(r *http.Request) string {
			if id := httpapi.BuildOf(r); id != "" {
				return id
			}
			return e2bcompat.BuildOf(r)
		},
		SandboxOf: func(r *http.Request) string {
			if id := e2bcompat.SandboxOf(r); id != "" {
				return id
			}
			return httpapi.SandboxOf(r)
		},
	})
}

// withConsole serves the web console at /ui/ and the native API everywhere
// else (the E2B routes come before both).
func withConsole(api, ui http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			ui.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// newServer serves h on ln. It starts last and stops first: its stop
// lets requests in flight end for a few seconds (streams that stay open
// are left to the process's end). served reports a serve that failed.
func newServer(ln net.Listener, h http.Handler) (p part, served <-chan error) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       120 * time.Second,
	}
	errc := make(chan error, 1)
	done := make(chan struct{})
	return part{
		name: "API server",
		start: func(context.Context) error {
			go func() {
				defer close(done)
				errc <- srv.Serve(ln)
			}()
			return nil
		},
		stop: func(ctx context.Context) error {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			<-done
			return nil
		},
	}, errc
}

// serveDebug serves the Go profiler, for profiling the create and exec
// paths; it is off unless configured.
func serveDebug(ctx context.Context, addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("pprof listening", "addr", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("pprof listener", "err", err)
	}
}
