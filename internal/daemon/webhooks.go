package daemon

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/webhook"
)

// startWebhooks starts the lifecycle webhooks: registrations and queue in
// the catalog, secrets sealed with the egress secrets' keyset, deliveries
// through the tenant dialer (SPACE_WEBHOOK_ALLOW exempts addresses). It
// must start before anything writes sandbox records (the recovery).
func startWebhooks(ctx context.Context, cfg config.Config, catalog store.Catalog, st *store.Watched, sec *secrets.Store,
	local *dialer.Local, reg prometheus.Registerer, log *slog.Logger) (*webhook.Service, error) {
	d := dialer.New(dialer.Config{
		Floor: append([]netip.Prefix{cfg.SandboxCIDR}, cfg.EgressFloor...),
		Allow: cfg.WebhookAllow, Local: local, Logger: log,
	})
	svc := webhook.New(webhook.Config{
		QueueLimit: cfg.WebhookQueue, RetryMax: cfg.WebhookRetryMax, Logger: log, Registry: reg,
	}, catalog, sec, d)
	if err := svc.Start(ctx, st); err != nil {
		return nil, err
	}
	return svc, nil
}
