package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// fakeFreezer records freezes and thaws.
type fakeFreezer struct {
	frozen         bool
	freezes, thaws int
}

func (f *fakeFreezer) FreezeIdle(context.Context, string) error {
	f.frozen = true
	f.freezes++
	return nil
}

func (f *fakeFreezer) ThawIdle(context.Context, string) error {
	f.frozen = false
	f.thaws++
	return nil
}

func (f *fakeFreezer) IdleFrozen(context.Context, string) (bool, error) { return f.frozen, nil }

func TestRestFreezesOnlyWhenIdle(t *testing.T) {
	const delay = time.Minute
	for _, tc := range []struct {
		name    string
		idle    time.Duration // since the last request before this one
		request bool          // a request is made now
		quiet   bool          // by spaced for itself (withoutWaking)
		open    bool          // and is still open
		freeze  bool
	}{
		{name: "idle past the delay", idle: 2 * delay, freeze: true},
		{name: "idle less than the delay", idle: delay / 2},
		{name: "a stream open", idle: 2 * delay, request: true, open: true},
		{name: "a request just ended", idle: 2 * delay, request: true},
		{name: "only spaced's own read since", idle: 2 * delay, request: true, quiet: true, freeze: true},
		{name: "spaced's own read still open", idle: 2 * delay, request: true, quiet: true, open: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeFreezer{}
			now := time.Now()
			r := &rest{id: "sb", fr: fr, last: now.Add(-tc.idle)}
			if tc.request {
				ctx := context.Background()
				if tc.quiet {
					ctx = withoutWaking(ctx)
				}
				release, err := r.hold(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.open {
					release()
				}
			}
			froze, err := r.freezeIfIdle(context.Background(), now, delay)
			if err != nil || froze != tc.freeze || fr.frozen != tc.freeze {
				t.Errorf("froze %v (freezer frozen %v, %v), want %v", froze, fr.frozen, err, tc.freeze)
			}
		})
	}
}

func TestRestRequestThaws(t *testing.T) {
	fr := &fakeFreezer{frozen: true}
	r := &rest{id: "sb", fr: fr, frozen: true}
	if _, err := r.hold(withoutWaking(context.Background())); !errors.Is(err, errFrozen) || !fr.frozen {
		t.Fatalf("spaced's own read of a frozen sandbox: %v, frozen %v; want errFrozen and still frozen", err, fr.frozen)
	}
	release, err := r.hold(context.Background())
	if err != nil || fr.frozen || fr.thaws != 1 || r.isFrozen() {
		t.Fatalf("a request to a frozen sandbox: %v, thaws %d, frozen %v", err, fr.thaws, fr.frozen)
	}
	if froze, _ := r.freezeIfIdle(context.Background(), time.Now().Add(time.Hour), time.Second); froze {
		t.Error("froze while the request was open")
	}
	release()
	release() // a second release is a no-op
	if r.holds != 0 {
		t.Errorf("holds %d after release", r.holds)
	}
}

func TestHoldBodyKeepsUpgradedConn(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	released := 0
	body := holdBody(a, func() { released++ })
	if _, ok := body.(io.ReadWriteCloser); !ok {
		t.Fatal("the held answer of an upgrade is no longer writable")
	}
	body.Close()
	if released != 1 {
		t.Errorf("released %d times on close, want 1", released)
	}
}

// TestRestLookIfDue: the reaper looks at an awake sandbox every time, a
// frozen one once per frozenLookEvery, a hibernated one never.
func TestRestLookIfDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name       string
		frozen     bool
		hibernated bool
		// at are the times of the reaper's ticks, from t0.
		at   []time.Duration
		want []bool
	}{
		{"awake", false, false, []time.Duration{0, time.Second, 2 * time.Second}, []bool{true, true, true}},
		{"frozen", true, false,
			[]time.Duration{0, time.Second, frozenLookEvery - time.Second, frozenLookEvery, frozenLookEvery + time.Second},
			[]bool{true, false, false, true, false}},
		{"frozen, clock gone back", true, false, []time.Duration{time.Hour, 0}, []bool{true, true}},
		{"hibernated", false, true, []time.Duration{0, frozenLookEvery}, []bool{false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &rest{frozen: tt.frozen, hibernated: tt.hibernated}
			for i, d := range tt.at {
				looked := false
				ran := r.lookIfDue(t0.Add(d), func() { looked = true })
				if ran != tt.want[i] || looked != tt.want[i] {
					t.Errorf("tick at %s: looked %v (reported %v), want %v", d, looked, ran, tt.want[i])
				}
			}
		})
	}
}

// TestRestingNow: the gauges count the live sandboxes resting frozen and
// hibernated; awake ones, ones without a rest (booting, or a runtime
// that cannot freeze) and one whose rest is changing are not counted.
func TestRestingNow(t *testing.T) {
	s := &Service{live: &liveSet{entries: map[string]*entry{}}}
	add := func(id string, r *rest) {
		a := &AgentConn{conns: &connSet{}}
		if r != nil {
			a.conns.rest.Store(r)
		}
		s.live.entries[id] = &entry{agent: a}
	}
	add("awake", &rest{})
	add("frozen-1", &rest{frozen: true})
	add("frozen-2", &rest{frozen: true})
	add("hibernated", &rest{frozen: true, hibernated: true})
	add("booting", nil)
	changing := &rest{frozen: true}
	changing.mu.Lock()
	add("changing", changing)
	frozen, hibernated := s.restingNow()
	changing.mu.Unlock()
	if frozen != 2 || hibernated != 1 {
		t.Errorf("resting: %d frozen, %d hibernated; want 2 and 1", frozen, hibernated)
	}
}
