// Package webhook delivers sandbox lifecycle events to the URLs tenants
// register (E2B's /events/webhooks): registrations in the catalog with
// their signature secret sealed, events derived from the store's own log
// of sandbox record writes, and a per-tenant bounded queue in the catalog
// that a restart finds again. Every delivery connects through the tenant
// dialer (internal/egress/dialer), so no event goes to the platform floor
// or to this node unless the operator allows that address.
package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Event types, as E2B names them.
const (
	Created = "sandbox.lifecycle.created"
	Updated = "sandbox.lifecycle.updated"
	Killed  = "sandbox.lifecycle.killed"
	Paused  = "sandbox.lifecycle.paused"
	Resumed = "sandbox.lifecycle.resumed"
)

// EventTypes are the types a webhook may subscribe to.
var EventTypes = []string{Created, Updated, Killed, Paused, Resumed}

// Limits on what a registration holds.
const (
	MaxNameLen   = 256
	MaxURLLen    = 2048
	MaxSecretLen = 1024
	// MaxPerTenant bounds a tenant's webhooks.
	MaxPerTenant = 20
)

// Sealer seals signature secrets at rest (the secrets keyset of
// internal/egress/secrets).
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Unseal(ciphertext, associated []byte) ([]byte, error)
}

// Checker says why an address may not be dialled (the tenant dialer's
// Check), or nil.
type Checker interface {
	Check(ip netip.Addr) error
}

// Webhook is a registration as callers see it: never its secret.
type Webhook struct {
	ID        string
	Tenant    string
	Name      string
	URL       string
	Enabled   bool
	Events    []string
	CreatedAt time.Time
}

// Spec is what a registration asks for; nil fields of an update are left
// as they are.
type Spec struct {
	Name    *string
	URL     *string
	Enabled *bool
	Events  *[]string
	Secret  *string
}

func view(w *store.Webhook) *Webhook {
	return &Webhook{ID: w.ID, Tenant: tenant.Of(w.Tenant), Name: w.Name, URL: w.URL, Enabled: w.Enabled,
		Events: slices.Clone(w.Events), CreatedAt: w.CreatedAt}
}

// Register makes a webhook of the caller's tenant.
func (s *Service) Register(ctx context.Context, spec Spec) (*Webhook, error) {
	p := tenant.FromContext(ctx)
	if spec.URL == nil || *spec.URL == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "url is required")
	}
	if spec.Secret == nil || *spec.Secret == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "signatureSecret is required: deliveries are signed with it")
	}
	all, err := s.store.ListWebhooks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	n := 0
	for _, w := range all {
		if tenant.Of(w.Tenant) == p.Tenant {
			n++
		}
	}
	if n >= MaxPerTenant {
		return nil, errdefs.New(errdefs.ErrResourceExhausted, "a tenant has at most %d webhooks", MaxPerTenant)
	}
	w := &store.Webhook{ID: newID(), Tenant: p.Tenant, Enabled: true, Events: slices.Clone(EventTypes), CreatedAt: time.Now().UTC()}
	if err := s.apply(ctx, w, spec); err != nil {
		return nil, err
	}
	if err := s.store.PutWebhook(ctx, w); err != nil {
		return nil, fmt.Errorf("store webhook: %w", err)
	}
	s.log.Info("webhook registered", "webhook", w.ID, "tenant", w.Tenant, "url", w.URL)
	return view(w), nil
}

// Update changes what spec says of a webhook of the caller's tenant.
func (s *Service) Update(ctx context.Context, id string, spec Spec) (*Webhook, error) {
	w, err := s.own(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.apply(ctx, w, spec); err != nil {
		return nil, err
	}
	if err := s.store.PutWebhook(ctx, w); err != nil {
		return nil, fmt.Errorf("store webhook: %w", err)
	}
	return view(w), nil
}

// Get returns a webhook of the caller's tenant.
func (s *Service) Get(ctx context.Context, id string) (*Webhook, error) {
	w, err := s.own(ctx, id)
	if err != nil {
		return nil, err
	}
	return view(w), nil
}

// List returns the caller's tenant's webhooks, oldest first.
func (s *Service) List(ctx context.Context) ([]*Webhook, error) {
	p := tenant.FromContext(ctx)
	all, err := s.store.ListWebhooks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	out := []*Webhook{}
	for _, w := range all {
		if p.Owns(w.Tenant) {
			out = append(out, view(w))
		}
	}
	slices.SortFunc(out, func(a, b *Webhook) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Delete removes a webhook of the caller's tenant and what it had queued.
func (s *Service) Delete(ctx context.Context, id string) error {
	if _, err := s.own(ctx, id); err != nil {
		return err
	}
	if err := s.store.DeleteWebhook(ctx, id); err != nil {
		return fmt.Errorf("delete webhook: %w", err)
	}
	s.queue.forget(id)
	return nil
}

// own reads a webhook the caller's tenant owns; another tenant's is
// unknown.
func (s *Service) own(ctx context.Context, id string) (*store.Webhook, error) {
	w, err := s.store.GetWebhook(ctx, id)
	if err == nil && !tenant.FromContext(ctx).Owns(w.Tenant) {
		err = errdefs.New(errdefs.ErrNotFound, "webhook %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}

// apply checks spec and writes it into w; nothing is written when a
// field is wrong.
func (s *Service) apply(ctx context.Context, w *store.Webhook, spec Spec) error {
	next := *w
	if spec.Name != nil {
		if len(*spec.Name) > MaxNameLen {
			return errdefs.New(errdefs.ErrInvalidArgument, "name is longer than %d bytes", MaxNameLen)
		}
		next.Name = *spec.Name
	}
	if spec.URL != nil {
		if err := s.checkURL(ctx, *spec.URL); err != nil {
			return err
		}
		next.URL = *spec.URL
	}
	if spec.Enabled != nil {
		next.Enabled = *spec.Enabled
	}
	if spec.Events != nil {
		if len(*spec.Events) == 0 {
			return errdefs.New(errdefs.ErrInvalidArgument, "events is empty: name at least one of %s", strings.Join(EventTypes, ", "))
		}
		var evs []string
		for _, e := range *spec.Events {
			if !slices.Contains(EventTypes, e) {
				return errdefs.New(errdefs.ErrInvalidArgument, "event type %q is not one of %s", e, strings.Join(EventTypes, ", "))
			}
			if !slices.Contains(evs, e) {
				evs = append(evs, e)
			}
		}
		next.Events = evs
	}
	if spec.Secret != nil {
		if *spec.Secret == "" || len(*spec.Secret) > MaxSecretLen {
			return errdefs.New(errdefs.ErrInvalidArgument, "signatureSecret must be 1 to %d bytes", MaxSecretLen)
		}
		sealed, err := s.sealer.Seal([]byte(*spec.Secret), sealedFor(w.ID))
		if err != nil {
			return fmt.Errorf("seal webhook secret: %w", err)
		}
		next.SealedSecret = sealed
	}
	*w = next
	return nil
}

// checkURL refuses a URL deliveries could never go to: not http(s), or a
// host that is (or resolves to) an address the tenant dialer refuses.
// A name that does not resolve now is accepted: deliveries resolve it
// again, and the dialer checks every address they connect to.
func (s *Service) checkURL(ctx context.Context, raw string) error {
	if len(raw) > MaxURLLen {
		return errdefs.New(errdefs.ErrInvalidArgument, "url is longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "url %q is not an http(s) URL with a host (and no user info)", raw)
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := s.resolver.LookupNetIP(rctx, "ip", host)
		if err != nil {
			s.log.Info("webhook host does not resolve now; accepted", "host", host, "err", err)
		}
		addrs = ips
	}
	for _, a := range addrs {
		if err := s.dialer.Check(a); err != nil {
			s.log.Warn("webhook url refused at registration", "url", raw, "tenant", tenant.FromContext(ctx).Tenant, "err", err)
			return errdefs.New(errdefs.ErrInvalidArgument, "url %q: host %s is an address spaced does not deliver to (a private, loopback or platform address)", raw, host)
		}
	}
	return nil
}

func newID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// resolver is net.Resolver's lookup (tests give their own).
type resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ resolver = (*net.Resolver)(nil)

// sealedFor is the associated data a webhook's secret is sealed with:
// a sealed secret moved to another record does not open.
func sealedFor(id string) []byte { return []byte("webhook:" + id) }
