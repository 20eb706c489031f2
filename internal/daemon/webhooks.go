package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/webhook"
)

// newWebhooks makes the lifecycle webhooks: registrations and queue in
// the catalog, secrets sealed with the egress secrets' keyset, deliveries
// through the tenant dialer (SPACE_WEBHOOK_ALLOW exempts addresses). Its
// part must start before anything writes sandbox records (the recovery):
// it follows their changes from its start; its stop gives the queued
// deliveries a few seconds.
func newWebhooks(cfg config.Config, stor *storage, sec *secrets.Store, local *dialer.Local, reg prometheus.Registerer, log *slog.Logger) (*webhook.Service, part) {
	d := dialer.New(dialer.Config{
		Floor: append([]netip.Prefix{cfg.SandboxCIDR}, cfg.EgressFloor...),
		Allow: cfg.WebhookAllow, Local: local, Logger: log,
	})
	svc := webhook.New(webhook.Config{
		QueueLimit: cfg.WebhookQueue, RetryMax: cfg.WebhookRetryMax, Logger: log, Registry: reg,
	}, stor.catalog, sec, d)
	return svc, part{
		name:  "webhooks",
		start: func(ctx context.Context) error { return svc.Start(ctx, stor.watched) },
		stop:  func(context.Context) error { svc.Close(5 * time.Second); return nil },
	}
}
