// Package daemon wires spaced together: it is the one package that knows
// every other. Each part of spaced is made by a constructor here that
// receives what it needs (storage.go, sandboxes.go, egress.go,
// templates.go, webhooks.go, cluster.go, api.go); Run makes them in the
// order of their dependencies, starts each (parts.go) and, at shutdown,
// stops them in reverse.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

// stopWithin is how long each part may take to stop before shutdown names
// it and goes on without it.
const stopWithin = 10 * time.Second

// Run starts spaced and blocks until ctx ends, then shuts down. Sandboxes
// keep running across a restart; the next Run re-attaches them.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	apiKey, err := loadAPIKey(cfg)
	if err != nil {
		return err
	}
	// The API's address is taken first, before any part binds a port of
	// its own: the egress gateway listens on ports the kernel picks, and
	// one of them could be the API's (a test's spaced, told a port that
	// was free a moment before, failed with "address already in use" when
	// the gateway had drawn it). Connections wait in the backlog until
	// the server serves them.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	ps := &parts{log: log, stopWithin: stopWithin}
	defer func() {
		if err := ps.stop(); err != nil {
			log.Warn("shutdown: parts did not stop", "err", err)
		}
	}()
	served, err := start(ctx, cfg, ps, ln, apiKey, log)
	if err != nil {
		return err
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("spaced shutting down; sandboxes keep running")
	return nil
}

// start makes the parts in the order of their dependencies and starts
// each in ps; the caller stops them. It answers when the API serves.
func start(ctx context.Context, cfg config.Config, ps *parts, ln net.Listener, apiKey string, log *slog.Logger) (served <-chan error, err error) {
	stor, err := newStorage(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := ps.start(ctx, stor.part()); err != nil {
		return nil, err
	}
	tenants, err := tenant.New(ctx, stor.catalog, apiKey, cfg.TenantQuotas, log)
	if err != nil {
		return nil, err
	}
	apiAudit := tenant.NewAudit(stor.catalog, cfg.AuditRetention, log)
	if err := ps.start(ctx, loop("API audit log", apiAudit.Run)); err != nil {
		return nil, err
	}
	rt, err := gvisor.New(gvisor.Config{Logger: log, Runsc: cfg.RunscPath, Dir: cfg.DataDir, Debug: cfg.RunscDebug, FastPath: cfg.SystrapFastPath})
	if err != nil {
		return nil, err
	}
	if err := ps.start(ctx, loop("engine log bound", func(ctx context.Context) { rt.RunLogBound(ctx, time.Second) })); err != nil {
		return nil, err
	}
	if err := network.PrepareNetnsDir(); err != nil {
		return nil, err
	}
	// Volumes before the sandbox service: it mounts them into sandboxes.
	vols, err := volume.Open(ctx, volume.Config{
		Dir: filepath.Join(cfg.DataDir, "volumes"), ImagesDir: stor.imagesDir,
		DefaultMB: cfg.VolumeDefaultMB, MaxMB: cfg.VolumeMaxMB,
		Backups: stor.repos.volumes,
		Logger:  log,
	}, stor.catalog, stor.watched)
	if err != nil {
		return nil, err
	}
	if err := ps.start(ctx, loop("volume sweeper", func(ctx context.Context) { vols.RunSweeper(ctx, time.Hour) })); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	keys, err := openEgressKeys(ctx, cfg, stor)
	if err != nil {
		return nil, err
	}
	budget, err := nodeBudget(cfg, log)
	if err != nil {
		return nil, err
	}
	templates := &lateTemplates{}
	boxes := newSandboxes(cfg, sandboxDeps{storage: stor, runtime: rt, egress: keys, volumes: vols, budget: budget,
		quotas: tenants.Quotas, templates: templates, registry: reg, log: log})
	svc := boxes.svc
	local := nodeAddrs(stor.cluster, log)
	hooks, hooksPart := newWebhooks(cfg, stor, keys.secrets, local, reg, log)
	if err := ps.start(ctx, hooksPart); err != nil {
		return nil, err
	}
	// Egress denials are kept for the console as well as logged.
	denials := console.NewAuditLog(200)
	if err := ps.start(ctx, newGateway(cfg, gatewayDeps{keys: keys, sandboxes: sandbox.NewEgress(svc), local: local, audit: denials, log: log})); err != nil {
		return nil, err
	}
	tpl, tplPart, err := newTemplates(ctx, cfg, templateDeps{storage: stor, sandboxes: svc, runtime: rt, pulls: registryDialer(cfg, local, log), registry: reg, log: log})
	if err != nil {
		return nil, err
	}
	// The late bindings of the cycles between services (ARCHITECTURE.md,
	// "Parts"), before anything resolves a template or asks for a
	// tenant's usage.
	templates.bind(tpl)
	tenants.SetSandboxUsage(svc.Usage)
	tenants.SetTemplateBytes(tpl.TenantBytes)
	reg.MustRegister(tenant.NewCollector(tenants, tenants.Usage))
	if err := ps.start(ctx, tplPart); err != nil {
		return nil, err
	}
	if err := ps.start(ctx, boxes.part()); err != nil {
		return nil, err
	}
	var member *clusterMember // nil with one node
	if stor.cluster != nil {
		member, err = joinCluster(ctx, cfg, clusterDeps{catalog: stor.cluster, sandboxes: svc, templates: tpl, tenants: tenants,
			secrets: keys.secrets, capacity: budget.Sandboxes, registry: reg, log: log})
		if err != nil {
			return nil, err
		}
		if err := ps.start(ctx, member.part()); err != nil {
			return nil, err
		}
	}
	// Each sandbox's metrics over time and its log, kept for its life.
	tel := sandbox.NewTelemetry(svc, rt, sandbox.TelemetryConfig{Interval: cfg.MetricsInterval})
	if err := ps.start(ctx, loop("telemetry", tel.Run)); err != nil {
		return nil, err
	}
	handler, consolePart, err := newHandler(cfg, apiDeps{storage: stor, sandboxes: boxes, telemetry: tel, templates: tpl, secrets: keys.secrets,
		volumes: vols, webhooks: hooks, tenants: tenants, audit: apiAudit, cluster: member, registry: reg, denials: denials, log: log})
	if err != nil {
		return nil, err
	}
	if err := ps.start(ctx, consolePart); err != nil {
		return nil, err
	}
	if cfg.DebugAddr != "" {
		if err := ps.start(ctx, loop("pprof", func(ctx context.Context) { serveDebug(ctx, cfg.DebugAddr, log) })); err != nil {
			return nil, err
		}
	}
	server, served := newServer(ln, handler)
	if err := ps.start(ctx, server); err != nil {
		return nil, err
	}
	log.Info("spaced listening", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "sandboxes", svc.Running())
	return served, nil
}

// loadAPIKey returns the configured key, or the one stored in the data dir,
// or generates, stores (0600) and prints a new one.
func loadAPIKey(cfg config.Config) (string, error) {
	if cfg.APIKey != "" {
		return cfg.APIKey, nil
	}
	path := filepath.Join(cfg.DataDir, "api-key")
	if data, err := os.ReadFile(path); err == nil {
		if key := strings.TrimSpace(string(data)); key != "" {
			return key, nil
		}
	}
	b := make([]byte, 24)
	rand.Read(b)
	key := "space_" + hex.EncodeToString(b)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("store API key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("store API key: %w", err)
	}
	fmt.Fprintf(os.Stderr, "spaced: generated an API key (stored in %s):\n\n    %s\n\n", path, key)
	return key, nil
}
