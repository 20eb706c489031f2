package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/ociimage"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/template"
)

// templateDeps are what the template service is made of.
type templateDeps struct {
	storage *storage
	// sandboxes run the builds' steps.
	sandboxes *sandbox.Service
	runtime   runtime.Runtime
	// pulls is the dialer of registry pulls.
	pulls    *dialer.Dialer
	registry prometheus.Registerer
	log      *slog.Logger
}

// newTemplates opens the template service: builds run in sandboxes of
// the sandbox service, their artifacts go to the object store under
// templates/. Its part runs the collector, and its stop cancels the
// builds in progress.
func newTemplates(ctx context.Context, cfg config.Config, d templateDeps) (*template.Service, part, error) {
	agent := cfg.AgentBinary
	if agent == "" {
		agent = filepath.Join(cfg.TemplatesDir, template.BaseName, "current", "usr/local/bin/space-agent")
	}
	engine := "none"
	if cp, ok := d.runtime.(runtime.Checkpointer); ok {
		engine = fmt.Sprintf("%s; process revision %d", cp.Version(), runtime.ProcessRevision)
	}
	internet := true
	svc := d.sandboxes
	tpl, err := template.New(ctx, template.Config{
		Logger:       d.log,
		Dir:          cfg.TemplatesDir,
		WorkDir:      filepath.Join(cfg.DataDir, "template-work"),
		LogDir:       filepath.Join(cfg.DataDir, "builds"),
		Store:        d.storage.watched,
		Node:         clusterNode(cfg),
		Repo:         d.storage.repos.templates,
		Checkpoints:  d.storage.repos.checkpoints,
		Boxes:        sandbox.NewBuildBoxes(svc),
		Puller:       ociimage.NewPuller(d.pulls, d.log),
		Agent:        agent,
		Engine:       engine,
		Defaults:     runtime.Limits{CPUs: cfg.DefaultCPU, MemoryMB: cfg.DefaultMemoryMB, DiskMB: cfg.DefaultDiskMB, MaxProcs: cfg.DefaultMaxProcesses},
		MaxBuilds:    cfg.TemplateBuilds,
		ReserveBuild: svc.ReserveBuild,
		BuildTimeout: cfg.TemplateBuildTimeout,
		// Builds reach the internet through the egress gateway (a
		// Dockerfile installs packages), within the platform floor.
		Network:  &sandbox.NetworkPolicy{AllowInternet: &internet},
		CacheTTL: cfg.TemplateCacheTTL,
		MaxImage: cfg.TemplateMaxImage,
		// What a file set expands to, per tenant (the node's disk floor
		// is the work dir's, derived as admission's).
		MaxContext: cfg.TemplateMaxContext,
		Changed:    svc.Pools().TemplateChanged,
		Metrics:    template.NewMetrics(d.registry),
	})
	if err != nil {
		return nil, part{}, err
	}
	d.registry.MustRegister(template.NewCollector(tpl))
	p := withLoops(part{name: "templates", stop: func(context.Context) error { tpl.Close(); return nil }},
		func(ctx context.Context) { tpl.RunCollector(ctx, cfg.TemplateGCInterval) })
	return tpl, p, nil
}

// clusterNode is the node id records carry: "" with the embedded store.
func clusterNode(cfg config.Config) string {
	if cfg.DatabaseURL == "" {
		return ""
	}
	return cfg.NodeID
}
