package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// KeyPrefix starts every issued key, as E2B's keys start (some tools check).
const KeyPrefix = "e2b_"

// idLen is how many hex digits of a key after KeyPrefix are its public
// ID: 64 bits, so that IDs do not meet by chance (the store refuses one
// that does, and IssueKey draws again); the other 96 bits of the key's 160
// stay secret.
const idLen = 16

var tenantID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Service keeps tenants and keys. Keys are checked against an in-memory
// map of their hashes (loaded at start, updated on every change), so a
// request costs one SHA-256; a revoked key stops at once, and the requests
// it has open are cancelled.
type Service struct {
	log      *slog.Logger
	store    Store
	adminKey []byte
	defaults store.Quotas
	// sandboxUsage reads what a tenant's sandboxes hold (the sandbox
	// service, made after this one: SetSandboxUsage).
	sandboxUsage func(ctx context.Context, tenant string) (Usage, error)
	// templateBytes reads what a tenant's templates hold (the template
	// service, made after this one: SetTemplateBytes).
	templateBytes func(ctx context.Context, tenant string) (int64, error)
	// templateLocks serialize a tenant's template creates with their
	// quota check (AdmitTemplate).
	templateLocks sync.Map // tenant -> *sync.Mutex

	mu      sync.Mutex
	byHash  map[string]*store.APIKey
	tenants map[string]*store.Tenant
	// open are the cancel functions of the requests in flight, by key ID.
	open map[string]map[*context.CancelCauseFunc]struct{}
	// revoked are the key IDs revoked while this service ran: a request
	// whose key was checked just before its revocation must not start a
	// stream after it (Hold looks here under the same lock).
	revoked map[string]bool
	// onRevoke are told the ID of every key revoked (the console ends the
	// key's sessions).
	onRevoke []func(keyID string)
	rate     *rates
	// rateLimited counts creates refused by a tenant's rate.
	rateLimited *prometheus.CounterVec
}

// Store is what the service keeps tenants, keys and the audit log in, and
// reads the templates it counts against tenants' quotas from.
type Store interface {
	store.Tenants
	ListTemplates(ctx context.Context) ([]*store.Template, error)
	GetBuild(ctx context.Context, id string) (*store.Build, error)
}

// New loads the tenants and keys. adminKey is spaced's configured key;
// defaults are the quotas of tenants that set none.
func New(ctx context.Context, st Store, adminKey string, defaults store.Quotas, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{log: log, store: st, adminKey: []byte(adminKey), defaults: defaults,
		byHash: map[string]*store.APIKey{}, tenants: map[string]*store.Tenant{},
		open: map[string]map[*context.CancelCauseFunc]struct{}{}, revoked: map[string]bool{}, rate: newRates(),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "space_tenant_rate_limited_total",
			Help: "Creates, resumes and forks refused (429) by a tenant's rate of creates.",
		}, []string{"tenant"})}
	if _, err := st.GetTenant(ctx, Default); errdefs.Class(err) == errdefs.ErrNotFound {
		if err := st.CreateTenant(ctx, &store.Tenant{ID: Default, Name: "the admin key's tenant", CreatedAt: time.Now().UTC()}); err != nil {
			return nil, fmt.Errorf("create the default tenant: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("read the default tenant: %w", err)
	}
	ts, err := st.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("load tenants: %w", err)
	}
	for _, t := range ts {
		s.tenants[t.ID] = t
	}
	keys, err := st.ListAPIKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("load API keys: %w", err)
	}
	for _, k := range keys {
		if k.RevokedAt.IsZero() {
			s.byHash[k.Hash] = k
		}
	}
	return s, nil
}

func hashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// Principal returns the principal of key, or ErrUnauthenticated.
func (s *Service) Principal(key string) (Principal, error) {
	if len(s.adminKey) > 0 && subtle.ConstantTimeCompare([]byte(key), s.adminKey) == 1 {
		return Admin, nil
	}
	h := hashKey(key)
	s.mu.Lock()
	k := s.byHash[h]
	s.mu.Unlock()
	if k == nil {
		return Principal{}, errdefs.New(errdefs.ErrUnauthenticated, "invalid API key")
	}
	return Principal{Tenant: k.Tenant, Key: k.ID}, nil
}

// Hold ties ctx to p's key: when the key is revoked, the returned context
// is cancelled (an open stream or terminal ends). Call release when the
// request ends.
func (s *Service) Hold(ctx context.Context, p Principal) (context.Context, func()) {
	ctx = NewContext(ctx, p)
	if p.Key == AdminKeyID {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	if s.revoked[p.Key] {
		// Revoked between the key's check and here.
		s.mu.Unlock()
		cancel(ErrRevoked)
		return ctx, func() {}
	}
	set := s.open[p.Key]
	if set == nil {
		set = map[*context.CancelCauseFunc]struct{}{}
		s.open[p.Key] = set
	}
	set[&cancel] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(set, &cancel)
		if len(set) == 0 {
			// The key's last open request (a revoked key's set is gone
			// already, and no new one can start for it).
			delete(s.open, p.Key)
		}
		s.mu.Unlock()
		cancel(nil)
	}
}

// ErrRevoked is the cause of a request cancelled by its key's revocation
// (context.Cause): what a stream it held says as it ends.
var ErrRevoked = errdefs.New(errdefs.ErrUnauthenticated, "the API key was revoked")

// CreateTenant makes a tenant.
func (s *Service) CreateTenant(ctx context.Context, id, name string, q store.Quotas) (*store.Tenant, error) {
	if !tenantID.MatchString(id) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "tenant id %q: use 1-63 lower-case letters, digits and '-', starting with a letter or digit", id)
	}
	if err := checkQuotas(q); err != nil {
		return nil, err
	}
	t := &store.Tenant{ID: id, Name: name, CreatedAt: time.Now().UTC(), Quotas: q}
	if err := s.store.CreateTenant(ctx, t); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.tenants[id] = t
	s.mu.Unlock()
	s.log.Info("tenant created", "tenant", id)
	return t, nil
}

// SetQuotas replaces a tenant's quotas.
func (s *Service) SetQuotas(ctx context.Context, id string, q store.Quotas) (*store.Tenant, error) {
	if err := checkQuotas(q); err != nil {
		return nil, err
	}
	t, err := s.Tenant(id)
	if err != nil {
		return nil, err
	}
	nt := *t
	nt.Quotas = q
	if err := s.store.UpdateTenant(ctx, &nt); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.tenants[id] = &nt
	s.mu.Unlock()
	s.rate.forget(id)
	return &nt, nil
}

// Tenant returns a tenant.
func (s *Service) Tenant(id string) (*store.Tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tenants[id]
	if t == nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "tenant %q not found", id)
	}
	return t, nil
}

// Tenants lists tenants by ID.
func (s *Service) Tenants() []*store.Tenant {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*store.Tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// IssueKey makes a key for tenant and returns it: the only time the key
// itself is seen.
func (s *Service) IssueKey(ctx context.Context, tenant, name string) (string, *store.APIKey, error) {
	if _, err := s.Tenant(tenant); err != nil {
		return "", nil, err
	}
	if len(name) > 200 {
		return "", nil, errdefs.New(errdefs.ErrInvalidArgument, "key name is longer than 200 bytes")
	}
	for attempt := 0; ; attempt++ {
		raw := make([]byte, 20)
		if _, err := rand.Read(raw); err != nil {
			return "", nil, fmt.Errorf("make key: %w", err)
		}
		key := KeyPrefix + hex.EncodeToString(raw)
		k := &store.APIKey{ID: key[:len(KeyPrefix)+idLen], Tenant: tenant, Name: name, Hash: hashKey(key), CreatedAt: time.Now().UTC()}
		err := s.store.CreateAPIKey(ctx, k)
		if errdefs.Class(err) == errdefs.ErrAlreadyExists && attempt < 3 {
			continue // an ID drawn before: draw another key
		}
		if err != nil {
			return "", nil, err
		}
		s.mu.Lock()
		s.byHash[k.Hash] = k
		s.mu.Unlock()
		s.log.Info("API key issued", "tenant", tenant, "key", k.ID)
		return key, k, nil
	}
}

// Keys lists the keys of tenant ("" for every tenant's), revoked ones
// included, by creation time.
func (s *Service) Keys(ctx context.Context, tenant string) ([]*store.APIKey, error) {
	all, err := s.store.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*store.APIKey
	for _, k := range all {
		if tenant == "" || k.Tenant == tenant {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// RevokeKey stops key id at once: new requests are refused and the
// requests it has open are cancelled.
func (s *Service) RevokeKey(ctx context.Context, id string) (*store.APIKey, error) {
	k, err := s.store.RevokeAPIKey(ctx, id, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	n := s.drop(k)
	s.log.Info("API key revoked", "tenant", k.Tenant, "key", id, "requests_cancelled", n)
	return k, nil
}

// OnRevoke has fn told the ID of every key revoked from now on (here or,
// once Reload sees it, on another node), after its requests in flight are
// cancelled.
func (s *Service) OnRevoke(fn func(keyID string)) {
	s.mu.Lock()
	s.onRevoke = append(s.onRevoke, fn)
	s.mu.Unlock()
}

// drop forgets revoked key k and cancels its requests in flight; it
// answers how many.
func (s *Service) drop(k *store.APIKey) int {
	s.mu.Lock()
	delete(s.byHash, k.Hash)
	s.revoked[k.ID] = true
	var cancels []context.CancelCauseFunc
	for c := range s.open[k.ID] {
		cancels = append(cancels, *c)
	}
	delete(s.open, k.ID)
	hooks := s.onRevoke
	s.mu.Unlock()
	for _, c := range cancels {
		c(ErrRevoked)
	}
	for _, fn := range hooks {
		fn(k.ID)
	}
	return len(cancels)
}

// Reload reads tenants and keys from the store again: in a cluster,
// another node issued or revoked a key, or changed a tenant's quotas. A
// key revoked there stops working here, its open streams included.
func (s *Service) Reload(ctx context.Context) error {
	ts, err := s.store.ListTenants(ctx)
	if err != nil {
		return fmt.Errorf("reload tenants: %w", err)
	}
	keys, err := s.store.ListAPIKeys(ctx)
	if err != nil {
		return fmt.Errorf("reload API keys: %w", err)
	}
	tenants := map[string]*store.Tenant{}
	for _, t := range ts {
		tenants[t.ID] = t
	}
	var revoked []*store.APIKey
	s.mu.Lock()
	s.tenants = tenants
	for _, k := range keys {
		switch _, known := s.byHash[k.Hash]; {
		case k.RevokedAt.IsZero():
			s.byHash[k.Hash] = k
		case known:
			revoked = append(revoked, k)
		}
	}
	s.mu.Unlock()
	for _, k := range revoked {
		n := s.drop(k)
		s.log.Info("API key revoked on another node", "tenant", k.Tenant, "key", k.ID, "requests_cancelled", n)
	}
	return nil
}

// Quotas are tenant's quotas with the node's defaults filled in.
func (s *Service) Quotas(tenant string) store.Quotas {
	s.mu.Lock()
	t := s.tenants[Of(tenant)]
	s.mu.Unlock()
	q := store.Quotas{}
	if t != nil {
		q = t.Quotas
	}
	return withDefaults(q, s.defaults)
}
