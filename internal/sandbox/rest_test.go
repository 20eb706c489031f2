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
