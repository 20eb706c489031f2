// Package daemon wires spaced together: it is the one package that knows
// every other. Run starts the pieces in order and stops them in reverse.
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/cluster"
	"github.com/spacesandbox/space/internal/coderun"
	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/desktop"
	"github.com/spacesandbox/space/internal/e2bcompat"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/httpapi"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

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
	// Egress denials are kept for the console as well as logged: the
	// gateway tells it of each (startEgress).
	audit := console.NewAuditLog(200)
	catalog, err := openCatalog(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer catalog.Close()
	// Watched: the console's live list follows every sandbox change.
	st := store.Watch(catalog)
	tenants, err := tenant.New(ctx, catalog, apiKey, cfg.TenantQuotas, log)
	if err != nil {
		return err
	}
	apiAudit := tenant.NewAudit(catalog, cfg.AuditRetention, log)
	rt, err := gvisor.New(gvisor.Config{Logger: log, Runsc: cfg.RunscPath, Dir: cfg.DataDir, Debug: cfg.RunscDebug})
	if err != nil {
		return err
	}
	if err := network.PrepareNetnsDir(); err != nil {
		return err
	}

	objects, err := openObjectStore(cfg, log)
	if err != nil {
		return err
	}
	keys, err := openKeyring(cfg)
	if err != nil {
		return err
	}
	imagesDir := filepath.Join(cfg.DataDir, "images")
	if err := clearDir(imagesDir); err != nil {
		return err
	}

	// Hibernated sandboxes' images stay on this node's disk, whatever the
	// object store: a wake must not wait for it.
	hibernationDir, err := blobstore.NewFS(filepath.Join(cfg.DataDir, "hibernation"))
	if err != nil {
		return err
	}

	repos, err := openRepos(ctx, objects, keys, catalog, log)
	if err != nil {
		return err
	}

	// Volumes before the sandbox service: it mounts them into sandboxes.
	vols, err := volume.Open(ctx, volume.Config{
		Dir: filepath.Join(cfg.DataDir, "volumes"), ImagesDir: imagesDir,
		DefaultMB: cfg.VolumeDefaultMB, MaxMB: cfg.VolumeMaxMB,
		Backups: repos.volumes,
		Logger:  log,
	}, catalog, st)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var svc *sandbox.Service
	metrics := sandbox.NewMetrics(reg, func() int { return svc.Running() }, func() map[string]int { return svc.Pools().PoolSizes() })
	egressDir := filepath.Join(cfg.DataDir, "egress")
	sec, err := openSecrets(ctx, egressDir, catalog, keys)
	if err != nil {
		return err
	}
	caPEM, err := egress.LoadCA(egressDir)
	if err != nil {
		return err
	}
	// The gateway starts after the service it asks about; nothing calls
	// Changed before it is set (Recover and the API come later).
	var gw *egress.Gateway
	templates := &lateTemplates{}
	budget, err := nodeBudget(cfg, log)
	if err != nil {
		return err
	}
	svc = sandbox.New(sandbox.Config{
		Logger:         log,
		Templates:      templates,
		DefaultTimeout: cfg.DefaultTimeout,
		MaxTimeout:     cfg.MaxTimeout,
		Defaults: runtime.Limits{
			CPUs: cfg.DefaultCPU, MemoryMB: cfg.DefaultMemoryMB, DiskMB: cfg.DefaultDiskMB, MaxProcs: cfg.DefaultMaxProcesses,
		},
		Network:          network.Plan{CIDR: cfg.SandboxCIDR},
		Links:            network.Host{},
		AgentBootTimeout: cfg.AgentBootTimeout,
		Pools:            pools(cfg.Pools),
		PoolBoots:        cfg.PoolBoots,
		MaxBoots:         cfg.MaxBoots,
		Checkpoints:      repos.checkpoints,
		Keys:             keys,
		ImagesDir:        imagesDir,
		PausedRetention:  cfg.PausedRetention,
		IdleFreeze:       cfg.IdleFreeze,
		IdleHibernate:    cfg.IdleHibernate,
		Hibernation:      checkpoint.NewRepo(hibernationDir, keys).WithLogger(log),
		Egress: sandbox.EgressConfig{
			CAPEM:        caPEM,
			SecretExists: func(name string) bool { _, ok := sec.Get(name); return ok },
			Changed:      func() { gw.Refresh() },
		},
		Volumes:   vols,
		Admission: &sandbox.AdmissionConfig{Budget: budget, DiskPath: cfg.DataDir},
		Quotas:    tenants.Quotas,
		// In cluster mode a paused sandbox may be resumed on another node
		// at once; nodes sharing a host (the tests) would meet its old
		// network under the same name.
		TeardownBeforeAnswer: cfg.DatabaseURL != "",
	}, st, rt, metrics)
	tenants.SetSandboxUsage(svc.Usage)
	reg.MustRegister(sandbox.PoolCollector(svc.Pools()), admission.Collector(svc.Admission()), tenant.NewCollector(tenants, tenants.Usage))
	local := nodeAddrs(catalog, log)
	hooks, err := startWebhooks(ctx, cfg, catalog, st, sec, local, reg, log)
	if err != nil {
		return err
	}
	// Closed after the sandbox service (defers run in reverse): the
	// events of its last writes are queued before it stops.
	defer hooks.Close(5 * time.Second)
	gw, err = startEgress(cfg, sandbox.NewEgress(svc), sec, egressDir, local, log, audit)
	if err != nil {
		return err
	}
	defer gw.Close()
	tpl, err := openTemplates(ctx, cfg, st, repos, keys, svc, rt, reg, registryDialer(cfg, local, log), log)
	if err != nil {
		return err
	}
	templates.t = tpl
	tenants.SetTemplateBytes(tpl.TenantBytes)
	defer tpl.Close()
	if err := svc.Recover(ctx); err != nil {
		return err
	}
	gw.Refresh()
	svc.StartPools(ctx)
	defer svc.Close()
	// The parts' goroutines: each stops when its context ends, and stop
	// joins them (see the end).
	var bg background
	memberCtx, leave := context.WithCancel(ctx)
	defer leave()
	var router *cluster.Router
	var clusterSecret []byte
	var nodes httpapi.Cluster // nil with one node
	if pg, ok := catalog.(*store.Postgres); ok {
		m, err := cluster.Join(ctx, cluster.Config{
			Logger:  log,
			Catalog: pg, Node: memberNode{svc}, ID: cfg.NodeID, Address: cfg.NodeAddress, Lease: cfg.NodeLease,
			Capacity: budget.Sandboxes, Registry: reg, Lost: func(ctx context.Context) { failLostBuilds(ctx, pg, tpl, log) },
		})
		if err != nil {
			return err
		}
		bg.Go("cluster membership", func() { m.Run(memberCtx) })
		fresh := make([]byte, 32)
		rand.Read(fresh)
		if clusterSecret, err = pg.ClusterSecret(ctx, fresh); err != nil {
			return err
		}
		drainer := cluster.NewDrainer(cfg.NodeID, pg, drainSandboxes{svc}, log)
		nodes = drainer
		router = cluster.NewRouter(pg, cluster.Hooks{
			Tenants: func() {
				if err := tenants.Reload(memberCtx); err != nil {
					log.Warn("reload tenants and keys", "err", err)
				}
			},
			Migration: func(id string) { drainer.MigrationRequested(memberCtx, id) },
			Missed:    func() { drainer.Rescan(memberCtx) },
			Secrets: func() {
				if err := sec.Reload(); err != nil {
					log.Warn("reload secrets", "err", err)
				}
			},
		}, log)
		bg.Go("cluster router", func() { router.Run(memberCtx) })
		bg.Go("cluster drainer", func() { drainer.Run(memberCtx, cfg.NodeLease/3) })
	}

	// The native API's client of the code interpreters in sandboxes.
	// How the API layers reach into running sandboxes.
	targets := sandbox.NewTargets(svc)
	code := coderun.New(coderun.Options{Target: targets.Target})
	// And of the native computer-use servers in desktop sandboxes.
	desk := desktop.New(desktop.Options{Target: targets.Target})
	// Each sandbox's metrics over time and its log, kept for its life.
	tel := sandbox.NewTelemetry(svc, rt, sandbox.TelemetryConfig{Interval: cfg.MetricsInterval})
	api := httpapi.New(httpapi.Options{
		Logger:    log,
		Sandboxes: svc, Changes: sandbox.NewFeed(st), Checkpoints: svc.Checkpoints(), Snapshots: svc.Snapshots(), Keys: sandbox.NewCustomerKeys(keys, repos.checkpoints, log),
		Commands: sandbox.NewCommands(targets, metrics), Files: sandbox.NewFiles(targets), Templates: tpl, Secrets: sec, Code: code, Desktop: desk, Volumes: vols, Telemetry: tel,
		Tenants: tenants, Audit: apiAudit, MaxUpload: cfg.TemplateMaxUpload, Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		MetricsToken: cfg.MetricsToken, Cluster: nodes, Pools: svc.Pools(),
	})
	// The console's calls go through the whole chain (set below), so that
	// in cluster mode one for a sandbox of another node reaches that node
	// as any API call does.
	var top http.Handler
	viaTop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { top.ServeHTTP(w, r) })
	ui, err := console.New(console.Options{API: viaTop, Keys: consoleKeys{tenants}, DefaultTenant: tenant.Default, Audit: audit, Logger: log})
	if err != nil {
		return err
	}
	defer ui.Close()
	var handler http.Handler = e2bcompat.New(e2bcompat.Options{
		Logger:    log,
		Sandboxes: svc, Checkpoints: svc.Checkpoints(), Snapshots: svc.Snapshots(), Targets: targets,
		Templates: tpl,
		Telemetry: tel,
		Volumes:   vols,
		Webhooks:  hooks,
		MaxUpload: cfg.TemplateMaxUpload,
		Tenants:   tenants,
		Audit:     apiAudit,
		// The cluster's forwarder keeps creates' Idempotency-Keys.
		IdempotencyKeys: router != nil,
		Next:            withConsole(api, ui),
	})
	if router != nil {
		// Any node serves every request: one that names a sandbox
		// another node runs goes there.
		handler = cluster.NewForwarder(cluster.ForwarderConfig{
			Logger: log,
			Self:   cfg.NodeID, Router: router, Secret: clusterSecret, Next: handler, Runs: targets.Runs, NodeOf: httpapi.NodeOf,
			IsCreate: func(r *http.Request) bool { return httpapi.IsCreate(r) || e2bcompat.IsCreate(r) },
			TemplateOf: func(r *http.Request, body []byte) string {
				if httpapi.IsCreate(r) {
					return httpapi.CreateTemplate(body)
				}
				return e2bcompat.CreateTemplate(body)
			},
			Idempotency: catalog.(*store.Postgres),
			Builds:      catalog.(*store.Postgres),
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
	top = handler
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       120 * time.Second,
	}
	reaperCtx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	bg.Go("sandbox reaper", func() { svc.RunReaper(reaperCtx, time.Second) })
	bg.Go("rest tiers", func() { svc.RunRest(reaperCtx) })
	bg.Go("template collector", func() { tpl.RunCollector(reaperCtx, cfg.TemplateGCInterval) })
	bg.Go("telemetry", func() { tel.Run(reaperCtx) })
	bg.Go("volume sweeper", func() { vols.RunSweeper(reaperCtx, time.Hour) })
	bg.Go("API audit log", func() { apiAudit.Run(reaperCtx) })

	if cfg.DebugAddr != "" {
		bg.Go("pprof", func() { serveDebug(reaperCtx, cfg.DebugAddr, log) })
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("spaced listening", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "sandboxes", svc.Running())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("spaced shutting down; sandboxes keep running")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// Then the parts' goroutines, before the parts close (the defers).
	stopReaper()
	leave()
	if err := bg.Wait(10 * time.Second); err != nil {
		log.Warn("shutdown: parts did not stop", "err", err)
	}
	return nil
}

// clusterNode is the node id records carry: "" with the embedded store.
func clusterNode(cfg config.Config) string {
	if cfg.DatabaseURL == "" {
		return ""
	}
	return cfg.NodeID
}

// openCatalog opens the cluster catalog when a database is configured, the
// node's embedded store otherwise.
func openCatalog(ctx context.Context, cfg config.Config, log *slog.Logger) (store.Catalog, error) {
	if cfg.DatabaseURL == "" {
		return store.OpenBolt(filepath.Join(cfg.DataDir, "state.db"))
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pg, err := store.OpenPostgres(octx, cfg.DatabaseURL, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	if before, after := pg.Migration(); before != after {
		log.Info("catalog schema migrated", "from", before, "to", after)
	}
	return pg, nil
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

// clearDir empties dir (which may be a mount point), making it if missing.
// Images left there by a crash mid-checkpoint or mid-restore are of no use:
// what was uploaded has no manifest and is swept from the store.
func clearDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clear images dir: %w", err)
		}
	}
	return nil
}

// openObjectStore opens the configured object store: S3 or a directory.
func openObjectStore(cfg config.Config, log *slog.Logger) (blobstore.Store, error) {
	if bucket, ok := strings.CutPrefix(cfg.ObjectStore, "s3://"); ok {
		return blobstore.NewS3(blobstore.S3Options{
			Logger:   log,
			Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: bucket,
			AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey,
		})
	}
	return blobstore.NewFS(cfg.ObjectStore)
}

// openKeyring opens (or creates) the platform key and loads the customer
// keys of the operator's key file, if any. Key material is never logged.
func openKeyring(cfg config.Config) (*seal.Keyring, error) {
	if err := os.MkdirAll(filepath.Dir(cfg.PlatformKeyFile), 0o700); err != nil {
		return nil, fmt.Errorf("key dir: %w", err)
	}
	keys, err := seal.OpenKeyring(cfg.PlatformKeyFile)
	if err != nil {
		return nil, err
	}
	if cfg.CustomerKeysFile == "" {
		return keys, nil
	}
	data, err := os.ReadFile(cfg.CustomerKeysFile)
	if err != nil {
		return nil, fmt.Errorf("customer keys file: %w", err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, " ")
		key, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if !ok || derr != nil {
			return nil, fmt.Errorf("customer keys file line %d: want \"<key id> <base64 key>\"", i+1)
		}
		if err := keys.SetCustomerKey(id, key); err != nil {
			return nil, fmt.Errorf("customer keys file line %d: %w", i+1, err)
		}
	}
	return keys, nil
}

// startEgress starts the egress gateway, which installs the firewall that
// steers every sandbox packet to it, before any sandbox is re-attached.
func startEgress(cfg config.Config, sandboxes *sandbox.Egress, sec *secrets.Store, dir string, local *dialer.Local, log *slog.Logger, audit *console.AuditLog) (*egress.Gateway, error) {
	upstream := cfg.EgressDNS
	if upstream == "" {
		rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(rc.Servers) == 0 {
			return nil, fmt.Errorf("egress: no upstream resolver (set SPACE_EGRESS_DNS): %v", err)
		}
		upstream = net.JoinHostPort(rc.Servers[0], rc.Port)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("egress: system roots: %w", err)
	}
	if cfg.EgressUpstreamCA != "" {
		data, err := os.ReadFile(cfg.EgressUpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("egress: upstream CA: %w", err)
		}
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("egress: upstream CA %s holds no PEM certificate", cfg.EgressUpstreamCA)
		}
	}
	return egress.Start(egress.Config{
		CIDR: cfg.SandboxCIDR, IfPrefix: network.HostIfPrefix, Upstream: upstream, Floor: cfg.EgressFloor, Local: local,
		RootCAs: roots, Dir: dir, Secrets: sec, EgressAddrs: sandboxes.EgressAddrs, Logger: log,
		Denied: func(d egress.Denial) {
			audit.Add(console.AuditEntry{Time: d.Time, Level: slog.LevelWarn.String(), Message: "egress denied", Attrs: map[string]string{
				"sandbox": d.Sandbox, "tenant": d.Tenant, "what": d.What, "name": d.Name, "ip": d.IP, "port": strconv.Itoa(int(d.Port)), "rule": d.Rule, "reason": d.Reason,
			}})
		},
		Lookup: func(ip netip.Addr) (egress.Sandbox, bool) {
			v, ok := sandboxes.ByAddr(ip)
			return egress.Sandbox{ID: v.ID, Tenant: v.Tenant, Network: v.Network, Secrets: v.Secrets}, ok
		},
	})
}

// openTemplates starts the template service: builds run in sandboxes of
// svc, their artifacts go to the object store under templates/.
func openTemplates(ctx context.Context, cfg config.Config, st store.Store, repos *repos, keys *seal.Keyring, svc *sandbox.Service, rt runtime.Runtime, reg prometheus.Registerer, pulls *dialer.Dialer, log *slog.Logger) (*template.Service, error) {
	agent := cfg.AgentBinary
	if agent == "" {
		agent = filepath.Join(cfg.TemplatesDir, template.BaseName, "current", "usr/local/bin/space-agent")
	}
	engine := "none"
	if cp, ok := rt.(runtime.Checkpointer); ok {
		engine = cp.Version()
	}
	internet := true
	var opened atomic.Pointer[template.Service] // a scrape may come first
	metrics := template.NewMetrics(reg, func() int {
		if t := opened.Load(); t != nil {
			return t.Active()
		}
		return 0
	})
	tpl, err := template.New(ctx, template.Config{
		Logger:       log,
		Dir:          cfg.TemplatesDir,
		WorkDir:      filepath.Join(cfg.DataDir, "template-work"),
		LogDir:       filepath.Join(cfg.DataDir, "builds"),
		Store:        st,
		Node:         clusterNode(cfg),
		Repo:         repos.templates,
		Checkpoints:  repos.checkpoints,
		Boxes:        sandbox.NewBuildBoxes(svc),
		Puller:       ociimage.NewPuller(pulls, log),
		Agent:        agent,
		Engine:       engine,
		Defaults:     runtime.Limits{CPUs: cfg.DefaultCPU, MemoryMB: cfg.DefaultMemoryMB, DiskMB: cfg.DefaultDiskMB, MaxProcs: cfg.DefaultMaxProcesses},
		MaxBuilds:    cfg.TemplateBuilds,
		ReserveBuild: svc.ReserveBuild,
		BuildTimeout: cfg.TemplateBuildTimeout,
		// Builds reach the internet through the egress gateway (a
		// Dockerfile installs packages), within the platform floor.
		Network:  &store.NetworkPolicy{AllowInternet: &internet},
		CacheTTL: cfg.TemplateCacheTTL,
		MaxImage: cfg.TemplateMaxImage,
		// What a file set expands to, per tenant (the node's disk floor
		// is the work dir's, derived as admission's).
		MaxContext: cfg.TemplateMaxContext,
		Changed:    svc.Pools().TemplateChanged,
		Metrics:    metrics,
	})
	opened.Store(tpl)
	return tpl, err
}

// failLostBuilds fails the builds of the nodes whose lease lapsed (their
// build sandboxes went with them).
func failLostBuilds(ctx context.Context, pg *store.Postgres, tpl *template.Service, log *slog.Logger) {
	members, err := pg.Members(ctx)
	if err != nil {
		log.Warn("list nodes for their builds", "err", err)
		return
	}
	var lost []string
	for _, m := range members {
		if !m.Alive {
			lost = append(lost, m.ID)
		}
	}
	if _, err := tpl.FailBuildsOfLostNodes(ctx, lost); err != nil {
		log.Warn("fail the builds of lost nodes", "err", err)
	}
}

// lateTemplates lets the sandbox service, made first, ask the template
// service, which needs it to run builds.
type lateTemplates struct{ t *template.Service }

func (l *lateTemplates) Resolve(ctx context.Context, ref string) (*sandbox.Image, error) {
	return l.t.Resolve(ctx, ref)
}

func (l *lateTemplates) ImageRoot(template, image string) (string, error) {
	return l.t.ImageRoot(template, image)
}

func pools(in []config.PoolConfig) []sandbox.PoolConfig {
	out := make([]sandbox.PoolConfig, len(in))
	for i, p := range in {
		out[i] = sandbox.PoolConfig{Template: p.Template, Min: p.Min, Max: p.Max}
	}
	return out
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

// nodeBudget is the node's admission budgets: the configured ones, the
// rest derived from the host (admission.Resolve).
func nodeBudget(cfg config.Config, log *slog.Logger) (admission.Budget, error) {
	host, err := admission.ReadHost(cfg.DataDir)
	if err != nil {
		return admission.Budget{}, fmt.Errorf("read the host for the node's budgets: %w", err)
	}
	b := admission.Resolve(admission.Settings{
		MemoryMB: int64(cfg.NodeMemoryMB), DiskMB: int64(cfg.NodeDiskMB), Sandboxes: cfg.NodeMaxSandboxes,
	}, host, network.Plan{CIDR: cfg.SandboxCIDR}.Slots(), admission.PidMax())
	log.Info("node budgets", "memory_mb", b.MemoryBytes>>20, "disk_mb", b.DiskBytes>>20, "sandboxes", b.Sandboxes,
		"host_memory_floor_mb", b.MemoryFloor>>20, "host_disk_floor_mb", b.DiskFloor>>20)
	return b, nil
}

// memberNode is this node as its cluster membership sees it: the sandbox
// service and the sizes of its pools.
type memberNode struct{ *sandbox.Service }

func (n memberNode) PoolSizes() map[string]int { return n.Pools().PoolSizes() }

// drainSandboxes is the sandbox service as a drain sees it.
type drainSandboxes struct{ svc *sandbox.Service }

func (d drainSandboxes) SetDraining(on bool) { d.svc.SetDraining(on) }

func (d drainSandboxes) Movable() []cluster.Movable {
	var out []cluster.Movable
	for _, m := range d.svc.Movable() {
		out = append(out, cluster.Movable{ID: m.ID, Left: m.Left})
	}
	return out
}

func (d drainSandboxes) Pause(ctx context.Context, id string) error {
	_, err := d.svc.Checkpoints().Pause(ctx, id, sandbox.PauseOptions{})
	return err
}

func (d drainSandboxes) Resume(ctx context.Context, id string, timeout time.Duration) error {
	_, err := d.svc.Checkpoints().Resume(ctx, id, timeout)
	return err
}

// repos are the object store's artifact repositories: checkpoints and
// snapshots, template layers and starts, volume backups.
type repos struct {
	checkpoints, templates, volumes *checkpoint.Repo
}

// openRepos makes the repositories. In cluster mode they keep their
// manifests in the catalog too (lists read it, not the object store),
// brought up to date with the object store here.
func openRepos(ctx context.Context, objects blobstore.Store, keys *seal.Keyring, catalog store.Catalog, log *slog.Logger) (*repos, error) {
	r := &repos{
		checkpoints: checkpoint.NewRepo(objects, keys).WithLogger(log),
		templates:   checkpoint.NewRepoAt(objects, keys, "templates/").WithLogger(log),
		volumes:     checkpoint.NewRepoAt(objects, keys, "volumes/").WithLogger(log),
	}
	pg, ok := catalog.(*store.Postgres)
	if !ok {
		return r, nil
	}
	for _, repo := range []*checkpoint.Repo{r.checkpoints, r.templates, r.volumes} {
		start := time.Now()
		n, err := repo.WithIndex(pg).Reindex(ctx)
		if err != nil {
			return nil, fmt.Errorf("index the object store's manifests: %w", err)
		}
		log.Info("manifests indexed in the catalog", "repository", repo.Prefix(), "manifests", n, "ms", time.Since(start).Milliseconds())
	}
	return r, nil
}

// openSecrets opens the egress gateway's secrets: in the data dir on one
// node; in the catalog in a cluster, sealed under a keyset every node
// shares, which the catalog keeps sealed under the platform key.
func openSecrets(ctx context.Context, dir string, catalog store.Catalog, keys *seal.Keyring) (*secrets.Store, error) {
	pg, ok := catalog.(*store.Postgres)
	if !ok {
		return secrets.Open(dir)
	}
	const ad = "space/cluster/secrets-keyset"
	h, err := secrets.NewKeyset()
	if err != nil {
		return nil, err
	}
	plain, err := secrets.EncodeKeyset(h)
	if err != nil {
		return nil, err
	}
	fresh, err := keys.SealBytes(plain, []byte(ad))
	if err != nil {
		return nil, err
	}
	blob, err := pg.ClusterKey(ctx, "secrets", fresh)
	if err != nil {
		return nil, err
	}
	if plain, err = keys.OpenBytes(blob, []byte(ad)); err != nil {
		return nil, fmt.Errorf("open the cluster's secrets keyset (is SPACE_PLATFORM_KEY_FILE the one the other nodes use?): %w", err)
	}
	if h, err = secrets.DecodeKeyset(plain); err != nil {
		return nil, err
	}
	return secrets.OpenWith(pg.Secrets(), h)
}
