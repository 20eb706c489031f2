package store

import (
	"context"
	"time"
)

// Webhook is a tenant's registration of a URL for sandbox lifecycle
// events (E2B's /events/webhooks).
type Webhook struct {
	ID string `json:"id"`
	// Tenant owns the webhook (empty: the default tenant); it gets that
	// tenant's events only.
	Tenant    string    `json:"tenant,omitempty"`
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Enabled   bool      `json:"enabled"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
	// SealedSecret is the signature secret sealed under the secrets
	// keyset (internal/egress/secrets); never the secret itself.
	SealedSecret []byte `json:"sealed_secret,omitempty"`
}

// WebhookDelivery is one event waiting to be delivered to one webhook.
// Seq orders a node's queue (set by EnqueueWebhookDeliveries).
type WebhookDelivery struct {
	Seq       uint64    `json:"seq"`
	Webhook   string    `json:"webhook"`
	Tenant    string    `json:"tenant,omitempty"`
	Sandbox   string    `json:"sandbox"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	Body      []byte    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
}

// Webhooks keeps webhook registrations (shared by a cluster's nodes)
// and each node's queue of deliveries.
type Webhooks interface {
	// PutWebhook writes a registration, new or replacing one.
	PutWebhook(ctx context.Context, w *Webhook) error
	// GetWebhook returns a registration (ErrNotFound when none).
	GetWebhook(ctx context.Context, id string) (*Webhook, error)
	// ListWebhooks returns every registration (filtering is the caller's).
	ListWebhooks(ctx context.Context) ([]*Webhook, error)
	// DeleteWebhook removes a registration and its queued deliveries; one
	// that is not there is not an error.
	DeleteWebhook(ctx context.Context, id string) error
	// EnqueueWebhookDeliveries appends deliveries to this node's queue
	// in one transaction, setting each one's Seq.
	EnqueueWebhookDeliveries(ctx context.Context, ds []*WebhookDelivery) error
	// WebhookDeliveries answers this node's queue, oldest first.
	WebhookDeliveries(ctx context.Context) ([]*WebhookDelivery, error)
	// DeleteWebhookDelivery removes a delivery from this node's queue
	// (done or given up); one that is not there is not an error.
	DeleteWebhookDelivery(ctx context.Context, seq uint64) error
}
