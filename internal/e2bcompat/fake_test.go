package e2bcompat

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// fakeSandboxes is an in-memory sandbox service for the layers above it:
// it proves the translation, never that sandboxes work (test/e2b does).
type fakeSandboxes struct {
	mu      sync.Mutex
	sbs     map[string]*fakeSandbox
	n       int
	creates []sandbox.CreateRequest
	snaps   []*sandbox.Snapshot
	pauses  []sandbox.PauseOptions
}

type fakeSandbox struct {
	sb    sandbox.Sandbox
	token string
	ip    netip.Addr
}

func newFakeSandboxes() *fakeSandboxes {
	return &fakeSandboxes{sbs: map[string]*fakeSandbox{}}
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *fakeSandboxes) Create(ctx context.Context, req sandbox.CreateRequest) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Snapshot != "" {
		sn, err := f.snapshot(req.Snapshot)
		if err != nil {
			return nil, err
		}
		if req.Template == "" {
			req.Template = sn.Template
		}
	}
	if req.Template == "" {
		req.Template = "base"
	}
	if req.Template != "base" {
		return nil, errdefs.New(errdefs.ErrNotFound, "template %q not found", req.Template)
	}
	f.creates = append(f.creates, req)
	f.n++
	id := fmt.Sprintf("sbx%017d", f.n)
	created := base.Add(time.Duration(f.n) * time.Second)
	fs := &fakeSandbox{
		sb: sandbox.Sandbox{
			ID: id, Template: req.Template, State: sandbox.StateRunning,
			CreatedAt: created, ExpiresAt: created.Add(req.Timeout),
			CPU: 1, MemoryMB: 512, DiskMB: 1024, MaxProcs: 1024,
			Metadata: maps.Clone(req.Metadata), OpenAccess: req.OpenAccess, Network: req.Network,
		},
		token: fmt.Sprintf("token-%d", f.n),
		ip:    netip.AddrFrom4([4]byte{10, 0, 0, byte(f.n)}),
	}
	f.sbs[id] = fs
	out := fs.sb
	out.AccessToken = fs.token
	return &out, nil
}

func (f *fakeSandboxes) get(id string) (*fakeSandbox, error) {
	fs, ok := f.sbs[id]
	if !ok {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	return fs, nil
}

func (f *fakeSandboxes) running(id string) (*fakeSandbox, error) {
	fs, err := f.get(id)
	if err != nil {
		return nil, err
	}
	if fs.sb.State != sandbox.StateRunning {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, fs.sb.State)
	}
	return fs, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return nil, err
	}
	out := fs.sb
	return &out, nil
}

func (f *fakeSandboxes) List(ctx context.Context, lf sandbox.ListFilter) ([]*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*sandbox.Sandbox
	for _, fs := range f.sbs {
		if len(lf.States) > 0 && !slices.Contains(lf.States, fs.sb.State) {
			continue
		}
		ok := true
		for k, v := range lf.Metadata {
			ok = ok && fs.sb.Metadata[k] == v
		}
		if ok {
			sb := fs.sb
			out = append(out, &sb)
		}
	}
	return out, nil
}

func (f *fakeSandboxes) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return err
	}
	fs.sb.State = sandbox.StateKilled
	return nil
}

func (f *fakeSandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return nil, err
	}
	fs.sb.ExpiresAt = time.Now().Add(d)
	if d == 0 {
		fs.sb.State = sandbox.StateKilled
	}
	out := fs.sb
	return &out, nil
}

func (f *fakeSandboxes) ExtendTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return nil, err
	}
	if until := time.Now().Add(d); until.After(fs.sb.ExpiresAt) {
		fs.sb.ExpiresAt = until
	}
	out := fs.sb
	return &out, nil
}

func (f *fakeSandboxes) SetNetwork(ctx context.Context, id string, p *sandbox.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return err
	}
	fs.sb.Network = p
	return nil
}

func (f *fakeSandboxes) Target(id string) (sandbox.Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return sandbox.Target{}, err
	}
	return sandbox.Target{ID: id, IP: fs.ip, AccessToken: fs.token, OpenAccess: fs.sb.OpenAccess, Network: fs.sb.Network}, nil
}

func (f *fakeSandboxes) FindRunning(match func(token string) bool) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, fs := range f.sbs {
		if fs.sb.State == sandbox.StateRunning && match(fs.token) {
			return id, true
		}
	}
	return "", false
}

func (f *fakeSandboxes) token(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sbs[id].token
}

func (f *fakeSandboxes) Pause(ctx context.Context, id string, opts sandbox.PauseOptions) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return nil, err
	}
	f.pauses = append(f.pauses, opts)
	fs.sb.State = sandbox.StatePaused
	fs.sb.Checkpoint = &sandbox.CheckpointInfo{ID: id + "-c", DiskOnly: opts.DiskOnly}
	out := fs.sb
	return &out, nil
}

func (f *fakeSandboxes) Resume(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return nil, err
	}
	if fs.sb.State != sandbox.StatePaused {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s, not paused", id, fs.sb.State)
	}
	fs.sb.State, fs.sb.ExpiresAt = sandbox.StateRunning, base.Add(d)
	out := fs.sb
	return &out, nil
}

func (f *fakeSandboxes) Fork(ctx context.Context, id string, req sandbox.ForkRequest) ([]*sandbox.Sandbox, error) {
	f.mu.Lock()
	fs, err := f.running(id)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var out []*sandbox.Sandbox
	for range req.Count {
		sb, err := f.Create(ctx, sandbox.CreateRequest{Template: fs.sb.Template, Timeout: req.Timeout, Metadata: fs.sb.Metadata})
		if err != nil {
			return out, err
		}
		out = append(out, sb)
	}
	return out, nil
}

func (f *fakeSandboxes) AutoResumeTarget(ctx context.Context, id string) (sandbox.Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.get(id)
	if err != nil {
		return sandbox.Target{}, err
	}
	if fs.sb.State != sandbox.StatePaused || !fs.sb.AutoResume {
		return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, fs.sb.State)
	}
	return sandbox.Target{ID: id, AccessToken: fs.token, OpenAccess: fs.sb.OpenAccess}, nil
}

func (f *fakeSandboxes) TakeSnapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, err := f.running(id)
	if err != nil {
		return nil, err
	}
	sn := &sandbox.Snapshot{
		ID: fmt.Sprintf("%s-s%d", id, len(f.snaps)), SandboxID: id, Template: fs.sb.Template,
		CreatedAt: base.Add(time.Duration(len(f.snaps)) * time.Minute), Memory: opts.Memory,
	}
	if opts.Name != "" {
		name, tag, err := sandbox.ParseSnapshotName(opts.Name)
		if err != nil {
			return nil, err
		}
		sn.Name, sn.Tag = name, tag
		f.snaps = slices.DeleteFunc(f.snaps, func(o *sandbox.Snapshot) bool { return o.Ref() == sn.Ref() })
	}
	f.snaps = append(f.snaps, sn)
	return sn, nil
}

func (f *fakeSandboxes) matching(fl sandbox.SnapshotFilter) []*sandbox.Snapshot {
	var out []*sandbox.Snapshot
	for i := len(f.snaps) - 1; i >= 0; i-- { // newest first
		sn := f.snaps[i]
		if fl.SandboxID != "" && sn.SandboxID != fl.SandboxID {
			continue
		}
		name, tag, tagged := strings.Cut(fl.Ref, ":")
		if fl.Ref == "" || sn.ID == fl.Ref || name == sn.Name && (!tagged || tag == sn.Tag) {
			out = append(out, sn)
		}
	}
	return out
}

func (f *fakeSandboxes) Snapshots(ctx context.Context, fl sandbox.SnapshotFilter) ([]*sandbox.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.matching(fl), nil
}

func (f *fakeSandboxes) snapshot(ref string) (*sandbox.Snapshot, error) {
	if !strings.Contains(ref, ":") {
		for _, sn := range f.snaps {
			if sn.ID == ref {
				return sn, nil
			}
		}
		ref += ":default"
	}
	if found := f.matching(sandbox.SnapshotFilter{Ref: ref}); len(found) > 0 {
		return found[0], nil
	}
	return nil, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", ref)
}

func (f *fakeSandboxes) GetSnapshot(ctx context.Context, ref string) (*sandbox.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshot(ref)
}

func (f *fakeSandboxes) DeleteSnapshot(ctx context.Context, ref string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := f.matching(sandbox.SnapshotFilter{Ref: ref})
	if len(found) == 0 {
		return 0, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", ref)
	}
	f.snaps = slices.DeleteFunc(f.snaps, func(sn *sandbox.Snapshot) bool { return slices.Contains(found, sn) })
	return len(found), nil
}

// Owner: every fake sandbox is the default tenant's.
func (f *fakeSandboxes) Owner(ctx context.Context, id string) (string, bool) {
	_, err := f.Get(ctx, id)
	return tenant.Default, err == nil
}

// testTenants is a tenant service whose admin key is key, on a store in
// a temporary directory.
func testTenants(t testing.TB, key string) *tenant.Service {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := tenant.New(context.Background(), st, key, store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// fakeTelemetry answers for the fake's sandboxes (any state) with two
// samples and two log lines, and records the last log query.
type fakeTelemetry struct {
	sbs   *fakeSandboxes
	mu    sync.Mutex
	query sandbox.LogQuery
}

var fakeSamples = []sandbox.MetricSample{
	{Time: base, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 20 << 20, MemTotal: 512 << 20, MemCache: 5 << 20, DiskUsed: 8 << 20, DiskTotal: 1 << 30},
	{Time: base.Add(5 * time.Second), CPUCount: 2, CPUUsedPct: 99.5, MemUsed: 30 << 20, MemTotal: 512 << 20, DiskUsed: 9 << 20, DiskTotal: 1 << 30},
}

func (t *fakeTelemetry) Metrics(ctx context.Context, id string, from, to time.Time) ([]sandbox.MetricSample, error) {
	if _, err := t.sbs.Get(ctx, id); err != nil {
		return nil, err
	}
	var out []sandbox.MetricSample
	for _, m := range fakeSamples {
		if (from.IsZero() || !m.Time.Before(from)) && (to.IsZero() || !m.Time.After(to)) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (t *fakeTelemetry) LatestMetrics(ids []string) map[string]sandbox.MetricSample {
	out := map[string]sandbox.MetricSample{}
	for _, id := range ids {
		if _, err := t.sbs.Get(context.Background(), id); err == nil {
			out[id] = fakeSamples[1]
		}
	}
	return out
}

func (t *fakeTelemetry) Logs(ctx context.Context, id string, q sandbox.LogQuery) ([]sandbox.LogEntry, error) {
	if _, err := t.sbs.Get(ctx, id); err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.query = q
	t.mu.Unlock()
	return []sandbox.LogEntry{
		{Time: base, Level: "info", Message: "Sandbox created", Fields: map[string]string{"source": "spaced"}},
		{Time: base.Add(time.Second), Level: "info", Message: "Process with pid 7 started", Fields: map[string]string{"source": "agent", "pid": "7"}},
	}, nil
}
