package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Changes is the store's log of its sandbox record writes
// (store.Watched).
type Changes interface {
	LastSandboxChange() uint64
	SandboxChangesAfter(ctx context.Context, seq uint64) ([]store.SandboxChange, bool, error)
}

// Catalog is what the service keeps and reads: registrations, the queue,
// and the records of sandboxes that exist at start.
type Catalog interface {
	store.Webhooks
	LiveSandboxes(ctx context.Context) ([]*store.Sandbox, error)
	QuerySandboxes(ctx context.Context, q store.Query) ([]*store.Sandbox, *store.Cursor, error)
}

// Dialer is the tenant dialer: its Check at registration, its transport
// for deliveries.
type Dialer interface {
	Checker
	Transport() *http.Transport
}

// Config of a Service.
type Config struct {
	// QueueLimit bounds the deliveries a tenant has waiting (default
	// 10000); what comes beyond is dropped, counted and logged.
	QueueLimit int
	// RetryMin and RetryMax bound the wait between two attempts of one
	// delivery, doubling from the first to the second (defaults 1s, 5m).
	RetryMin, RetryMax time.Duration
	// MaxAge is how long a delivery is retried before it is dropped
	// (default 24h).
	MaxAge time.Duration
	// Timeout bounds one attempt (default 10s).
	Timeout  time.Duration
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Service keeps webhooks and delivers events to them.
type Service struct {
	store    Catalog
	sealer   Sealer
	dialer   Checker
	resolver resolver
	client   *http.Client
	cfg      Config
	log      *slog.Logger
	queue    *queue
	metrics  *metrics
	derive   *deriver

	// The follower's progress, for Close to drain it.
	changes  Changes
	mu       sync.Mutex
	followed uint64
	progress chan struct{} // closed and replaced when followed moves
	stop     context.CancelFunc
	stopped  chan struct{}
}

// New returns a Service; Start begins following changes and delivering.
func New(cfg Config, st Catalog, sealer Sealer, d Dialer) *Service {
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 10000
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = time.Second
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(5*time.Minute, cfg.RetryMin)
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = 24 * time.Hour
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		store: st, sealer: sealer, dialer: d, resolver: net.DefaultResolver, cfg: cfg, log: cfg.Logger,
		metrics: newMetrics(cfg.Registry), derive: newDeriver(),
		client: &http.Client{
			Transport: d.Transport(),
			Timeout:   cfg.Timeout,
			// A redirect is not followed: the receiver is the registered URL.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	s.queue = newQueue(s)
	return s
}

// Start seeds the event deriver with the sandboxes that exist, loads the
// queue a previous run left, and follows changes from now on until it
// is closed. It runs before anything writes sandbox records (the recovery at
// start included), so no write is missed.
func (s *Service) Start(ctx context.Context, changes Changes) error {
	from := changes.LastSandboxChange()
	live, err := s.store.LiveSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: read live sandboxes: %w", err)
	}
	paused, _, err := s.store.QuerySandboxes(ctx, store.Query{States: []string{store.StatePaused}})
	if err != nil {
		return fmt.Errorf("webhooks: read paused sandboxes: %w", err)
	}
	for _, rec := range slices.Concat(live, paused) {
		s.derive.seed(rec)
	}
	pending, err := s.store.WebhookDeliveries(ctx)
	if err != nil {
		return fmt.Errorf("webhooks: read the queue: %w", err)
	}
	// Following and delivering outlive ctx's cancellation (a daemon's
	// shutdown begins with it): Close ends them once the last writes'
	// events are queued.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.queue.load(fctx, pending)
	s.changes, s.followed, s.progress = changes, from, make(chan struct{})
	s.stop, s.stopped = cancel, make(chan struct{})
	go func() {
		defer close(s.stopped)
		s.follow(fctx, changes, from)
	}()
	return nil
}

// Close queues the events of every write made so far (waiting at most
// wait for that), then stops following and delivering: what is queued
// stays in the catalog for the next start (a delivery cut mid-flight is
// sent again then).
func (s *Service) Close(wait time.Duration) {
	if s.stop == nil {
		return
	}
	target := s.changes.LastSandboxChange()
	deadline := time.After(wait)
	for {
		s.mu.Lock()
		done, moved := s.followed >= target, s.progress
		s.mu.Unlock()
		if done {
			break
		}
		select {
		case <-moved:
			continue
		case <-deadline:
			s.log.Warn("webhooks: stopped before the last sandbox changes were queued; their events are lost")
		}
		break
	}
	s.stop()
	<-s.stopped
}

func (s *Service) advance(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followed = seq
	close(s.progress)
	s.progress = make(chan struct{})
}

// follow derives events from every sandbox record write, in order, and
// queues them for the webhooks that want them.
func (s *Service) follow(ctx context.Context, changes Changes, seq uint64) {
	for {
		batch, gap, err := changes.SandboxChangesAfter(ctx, seq)
		if err != nil {
			return // ctx ended
		}
		if gap {
			// More writes than the log keeps came between two reads: what
			// they changed is not known. Say so, and go on from now.
			s.log.Error("webhooks: sandbox changes were missed; some lifecycle events are lost", "after", seq)
			s.metrics.dropped.WithLabelValues("missed").Inc()
			seq = changes.LastSandboxChange()
			s.advance(seq)
			continue
		}
		for _, c := range batch {
			seq = c.Seq
			for _, ev := range s.derive.next(c.Sandbox, c.Deleted) {
				s.enqueue(ctx, ev)
			}
		}
		s.advance(seq)
	}
}

// enqueue writes one event's deliveries (one per webhook of its tenant
// that wants it) to the catalog, then hands them to their lanes.
func (s *Service) enqueue(ctx context.Context, ev *Payload) {
	hooks, err := s.store.ListWebhooks(ctx)
	if err != nil {
		s.log.Error("webhooks: list webhooks; event dropped", "event", ev.Type, "sandbox", ev.SandboxID, "err", err)
		s.metrics.dropped.WithLabelValues("store").Inc()
		return
	}
	body, err := json.Marshal(ev)
	if err != nil {
		s.log.Error("webhooks: encode event", "err", err)
		return
	}
	var ds []*store.WebhookDelivery
	for _, w := range hooks {
		if !w.Enabled || tenant.Of(w.Tenant) != ev.SandboxTeamID || !slices.Contains(w.Events, ev.Type) {
			continue
		}
		if !s.queue.reserve(w.Tenant) {
			s.log.Warn("webhooks: tenant's queue is full; event dropped", "tenant", tenant.Of(w.Tenant), "webhook", w.ID,
				"event", ev.Type, "sandbox", ev.SandboxID, "limit", s.cfg.QueueLimit)
			s.metrics.dropped.WithLabelValues("queue_full").Inc()
			continue
		}
		ds = append(ds, &store.WebhookDelivery{Webhook: w.ID, Tenant: w.Tenant, Sandbox: ev.SandboxID, EventID: ev.ID,
			EventType: ev.Type, Body: body, CreatedAt: time.Now().UTC()})
	}
	if len(ds) == 0 {
		return
	}
	if err := s.store.EnqueueWebhookDeliveries(ctx, ds); err != nil {
		for _, d := range ds {
			s.queue.release(d.Tenant)
		}
		s.log.Error("webhooks: queue deliveries; event dropped", "event", ev.Type, "sandbox", ev.SandboxID, "err", err)
		s.metrics.dropped.WithLabelValues("store").Add(float64(len(ds)))
		return
	}
	s.metrics.queued.Add(float64(len(ds)))
	s.queue.push(ctx, ds)
}
