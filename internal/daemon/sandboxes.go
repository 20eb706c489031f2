package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/volume"
)

// sandboxDeps are what the sandbox service is made of.
type sandboxDeps struct {
	storage *storage
	runtime runtime.Runtime
	egress  *egressKeys
	volumes *volume.Service
	budget  admission.Budget
	// quotas are the tenants' (tenant.Service.Quotas).
	quotas func(tenant string) store.Quotas
	// templates resolves templates: the template service, bound once it
	// is made (it runs its builds in this service's sandboxes).
	templates sandbox.Templates
	registry  prometheus.Registerer
	log       *slog.Logger
}

// sandboxes are the node's sandbox service and its series.
type sandboxes struct {
	svc     *sandbox.Service
	metrics *sandbox.Metrics
}

func newSandboxes(cfg config.Config, d sandboxDeps) *sandboxes {
	metrics := sandbox.NewMetrics(d.registry)
	svc := sandbox.New(sandbox.Config{
		Logger:         d.log,
		Templates:      d.templates,
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
		Checkpoints:      d.storage.repos.checkpoints,
		Keys:             d.storage.keys,
		ImagesDir:        d.storage.imagesDir,
		PausedRetention:  cfg.PausedRetention,
		IdleFreeze:       cfg.IdleFreeze,
		IdleHibernate:    cfg.IdleHibernate,
		Hibernation:      d.storage.hibernation,
		Egress:           d.egress.sandboxConfig(),
		Volumes:          d.volumes,
		Admission:        &sandbox.AdmissionConfig{Budget: d.budget, DiskPath: cfg.DataDir},
		Quotas:           d.quotas,
		// In cluster mode a paused sandbox may be resumed on another node
		// at once; nodes sharing a host (the tests) would meet its old
		// network under the same name.
		TeardownBeforeAnswer: cfg.DatabaseURL != "",
	}, d.storage.watched, d.runtime, metrics)
	d.registry.MustRegister(sandbox.NewCollector(svc), admission.Collector(svc.Admission()))
	return &sandboxes{svc: svc, metrics: metrics}
}

// part re-attaches at its start the sandboxes that ran on while spaced was
// away (after the webhooks, the egress gateway and the templates it needs
// have started), then fills the warm pools and runs the reaper and the
// rest tiers; its stop joins those and stops the pools, tearing down their
// unclaimed sandboxes. Claimed sandboxes keep running.
func (s *sandboxes) part() part {
	svc := s.svc
	return withLoops(part{
		name: "sandboxes",
		start: func(ctx context.Context) error {
			if err := svc.Recover(ctx); err != nil {
				return err
			}
			svc.StartPools(context.WithoutCancel(ctx))
			return nil
		},
		stop: func(context.Context) error { svc.Close(); return nil },
	},
		func(ctx context.Context) { svc.RunReaper(ctx, time.Second) },
		svc.RunRest,
	)
}

func pools(in []config.PoolConfig) []sandbox.PoolConfig {
	out := make([]sandbox.PoolConfig, len(in))
	for i, p := range in {
		out[i] = sandbox.PoolConfig{Template: p.Template, Min: p.Min, Max: p.Max}
	}
	return out
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

// lateTemplates is the one dependency bound after it is handed over: the
// sandbox service resolves templates through it, and the template
// service, made after the sandbox service, runs its builds in sandboxes
// of it. Run binds it before any part starts that resolves a template
// (the sandboxes' recovery and pools, the API).
type lateTemplates struct{ t *template.Service }

var errTemplatesUnbound = errors.New("templates are not open yet")

func (l *lateTemplates) bind(t *template.Service) { l.t = t }

func (l *lateTemplates) Resolve(ctx context.Context, ref string) (*sandbox.Image, error) {
	if l.t == nil {
		return nil, errTemplatesUnbound
	}
	return l.t.Resolve(ctx, ref)
}

func (l *lateTemplates) ImageRoot(template, image string) (string, error) {
	if l.t == nil {
		return "", errTemplatesUnbound
	}
	return l.t.ImageRoot(template, image)
}
