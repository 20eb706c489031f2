package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Headers of a delivery, as E2B sends them.
const (
	HeaderWebhookID        = "e2b-webhook-id"
	HeaderDeliveryID       = "e2b-delivery-id"
	HeaderSignatureVersion = "e2b-signature-version"
	HeaderSignature        = "e2b-signature"
)

// Sign is E2B's signature (version v1) of a body: SHA-256 of the secret
// followed by the raw body, base64 without padding.
func Sign(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return strings.TrimRight(base64.StdEncoding.EncodeToString(h.Sum(nil)), "=")
}

// queue holds the deliveries waiting, one lane per webhook: a lane
// delivers in order, the next only after the one before arrived (or was
// given up), so a receiver sees each sandbox's events in order.
type queue struct {
	s *Service

	mu      sync.Mutex
	lanes   map[string]*lane
	pending map[string]int // per tenant
}

type lane struct {
	webhook string
	items   []*store.WebhookDelivery
	wake    chan struct{}
	gone    bool
}

func newQueue(s *Service) *queue {
	return &queue{s: s, lanes: map[string]*lane{}, pending: map[string]int{}}
}

// reserve takes a place in tenant's queue; false when it is full.
func (q *queue) reserve(t string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[tenant.Of(t)] >= q.s.cfg.QueueLimit {
		return false
	}
	q.pending[tenant.Of(t)]++
	q.s.metrics.pending.Inc()
	return true
}

func (q *queue) release(t string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[tenant.Of(t)] > 0 {
		q.pending[tenant.Of(t)]--
		q.s.metrics.pending.Dec()
	}
}

// load takes the deliveries a previous run left (already counted in the
// catalog, so reserved here without a limit).
func (q *queue) load(ctx context.Context, ds []*store.WebhookDelivery) {
	q.mu.Lock()
	for _, d := range ds {
		q.pending[tenant.Of(d.Tenant)]++
		q.s.metrics.pending.Inc()
	}
	q.mu.Unlock()
	if len(ds) > 0 {
		q.s.log.Info("webhooks: deliveries left by the previous run", "count", len(ds))
	}
	q.push(ctx, ds)
}

// push appends reserved deliveries to their lanes, starting lanes as
// needed.
func (q *queue) push(ctx context.Context, ds []*store.WebhookDelivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, d := range ds {
		l := q.lanes[d.Webhook]
		if l == nil {
			l = &lane{webhook: d.Webhook, wake: make(chan struct{}, 1)}
			q.lanes[d.Webhook] = l
			go q.run(ctx, l)
		}
		l.items = append(l.items, d)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// forget drops a deleted webhook's lane (its deliveries went with it).
func (q *queue) forget(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lanes[id]; l != nil {
		for _, d := range l.items {
			if q.pending[tenant.Of(d.Tenant)] > 0 {
				q.pending[tenant.Of(d.Tenant)]--
				q.s.metrics.pending.Dec()
			}
		}
		l.items, l.gone = nil, true
		delete(q.lanes, id)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// head is the lane's next delivery (nil when it has none, or is gone).
func (q *queue) head(l *lane) (*store.WebhookDelivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l.gone {
		return nil, false
	}
	if len(l.items) == 0 {
		return nil, true
	}
	return l.items[0], true
}

// done takes d off its lane and out of the catalog.
func (q *queue) done(ctx context.Context, l *lane, d *store.WebhookDelivery) {
	if err := q.s.store.DeleteWebhookDelivery(ctx, d.Seq); err != nil {
		q.s.log.Warn("webhooks: remove a delivery from the queue (it may be sent again after a restart)", "seq", d.Seq, "err", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(l.items) > 0 && l.items[0] == d {
		l.items = l.items[1:]
		if q.pending[tenant.Of(d.Tenant)] > 0 {
			q.pending[tenant.Of(d.Tenant)]--
			q.s.metrics.pending.Dec()
		}
	}
}

// run delivers a lane's deliveries in order until ctx ends or the webhook
// is deleted.
func (q *queue) run(ctx context.Context, l *lane) {
	for {
		d, ok := q.head(l)
		if !ok {
			return
		}
		if d == nil {
			select {
			case <-l.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		q.deliver(ctx, l, d)
		if ctx.Err() != nil {
			return
		}
	}
}

// deliver sends d until it arrives, its webhook is gone, the dialer
// refuses its address, or it is older than MaxAge; between attempts it
// waits RetryMin, doubling up to RetryMax.
func (q *queue) deliver(ctx context.Context, l *lane, d *store.WebhookDelivery) {
	s := q.s
	wait := s.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		w, err := s.store.GetWebhook(ctx, d.Webhook)
		if errors.Is(err, errdefs.ErrNotFound) {
			s.log.Info("webhooks: webhook gone; delivery dropped", "webhook", d.Webhook)
			q.done(ctx, l, d)
			return
		}
		if err == nil {
			err = s.send(ctx, w, d)
		} else {
			err = fmt.Errorf("read the webhook: %w", err)
		}
		if err == nil {
			s.metrics.delivered.Inc()
			q.done(ctx, l, d)
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.metrics.failures.Inc()
		switch {
		case dialer.IsRefused(err):
			s.log.Warn("webhooks: the webhook's address is refused (platform floor or this node); delivery dropped",
				"webhook", d.Webhook, "tenant", tenant.Of(d.Tenant), "url", w.URL, "event", d.EventType, "err", err)
			s.metrics.dropped.WithLabelValues("refused").Inc()
			q.done(ctx, l, d)
			return
		case time.Since(d.CreatedAt) > s.cfg.MaxAge:
			s.log.Warn("webhooks: delivery older than the retry limit; dropped", "webhook", d.Webhook, "event", d.EventType,
				"sandbox", d.Sandbox, "attempts", attempt, "err", err)
			s.metrics.dropped.WithLabelValues("expired").Inc()
			q.done(ctx, l, d)
			return
		}
		s.log.Info("webhooks: delivery failed; will retry", "webhook", d.Webhook, "event", d.EventType, "sandbox", d.Sandbox,
			"attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		if _, ok := q.head(l); !ok {
			return // deleted meanwhile
		}
		wait = min(2*wait, s.cfg.RetryMax)
	}
}

// send makes one attempt: a POST of the body, signed.
func (s *Service) send(ctx context.Context, w *store.Webhook, d *store.WebhookDelivery) error {
	secret, err := s.sealer.Unseal(w.SealedSecret, sealedFor(w.ID))
	if err != nil {
		return fmt.Errorf("unseal the webhook's secret: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(d.Body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "spaced-webhooks")
	req.Header.Set(HeaderWebhookID, w.ID)
	req.Header.Set(HeaderDeliveryID, newEventID())
	req.Header.Set(HeaderSignatureVersion, "v1")
	req.Header.Set(HeaderSignature, Sign(string(secret), d.Body))
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}
