package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// fakeHibernator records hibernations and wakes; failWake makes the next
// wakes fail.
type fakeHibernator struct {
	fr            *fakeFreezer
	sleeps, wakes int
	failSleep     error
	failWake      error
	thawedAtSleep bool
}

func (h *fakeHibernator) hibernate(context.Context) (string, error) {
	h.thawedAtSleep = !h.fr.frozen
	if h.failSleep != nil {
		return "", h.failSleep
	}
	h.sleeps++
	return "img-" + string(rune('0'+h.sleeps)), nil
}

func (h *fakeHibernator) revive(_ context.Context, image string) error {
	if h.failWake != nil {
		return h.failWake
	}
	h.wakes++
	return nil
}

func TestRestHibernatesOnlyFrozenAndIdle(t *testing.T) {
	const delay = time.Hour
	for _, tc := range []struct {
		name      string
		frozen    bool
		idle      time.Duration
		open      bool
		hibernate bool
	}{
		{name: "frozen past the delay", frozen: true, idle: 2 * delay, hibernate: true},
		{name: "frozen, not yet the delay", frozen: true, idle: delay / 2},
		{name: "awake past the delay", idle: 2 * delay},
		{name: "frozen with a request open", frozen: true, idle: 2 * delay, open: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeFreezer{frozen: tc.frozen}
			h := &fakeHibernator{fr: fr}
			now := time.Now()
			r := &rest{id: "sb", fr: fr, deep: h, frozen: tc.frozen, last: now.Add(-tc.idle)}
			if tc.open {
				r.holds = 1
			}
			did, err := r.hibernateIfIdle(context.Background(), now, delay)
			if err != nil || did != tc.hibernate || r.isHibernated() != tc.hibernate || (h.sleeps == 1) != tc.hibernate {
				t.Fatalf("hibernated %v (%v), rest says %v, sleeps %d; want %v", did, err, r.isHibernated(), h.sleeps, tc.hibernate)
			}
			if tc.hibernate && (!h.thawedAtSleep || r.isFrozen() || r.tier() != RestHibernated) {
				t.Errorf("thawed before the checkpoint %v, frozen after %v, tier %s", h.thawedAtSleep, r.isFrozen(), r.tier())
			}
		})
	}
}

// A request to a hibernated sandbox restores it first; spaced's own reads
// do not; a failed wake leaves it hibernated and answers the error; an
// ended one is never woken again.
func TestRestRequestRevivesHibernated(t *testing.T) {
	ctx := context.Background()
	fr := &fakeFreezer{}
	h := &fakeHibernator{fr: fr}
	var tally atomic.Int64
	tally.Store(1)
	r := &rest{id: "sb", fr: fr, deep: h, hibernated: true, image: "img-1", tally: &tally}
	if _, err := r.hold(withoutWaking(ctx)); !errors.Is(err, errFrozen) || h.wakes != 0 {
		t.Fatalf("spaced's own read of a hibernated sandbox: %v, wakes %d; want errFrozen and none", err, h.wakes)
	}
	h.failWake = errdefs.New(errdefs.ErrUnavailable, "node at capacity")
	if _, err := r.hold(ctx); !errors.Is(err, h.failWake) || !r.isHibernated() {
		t.Fatalf("a refused wake: %v, hibernated %v; want the refusal and still hibernated", err, r.isHibernated())
	}
	h.failWake = nil
	release, err := r.hold(ctx)
	if err != nil || h.wakes != 1 || r.tier() != RestAwake || r.image != "" {
		t.Fatalf("a request to a hibernated sandbox: %v, wakes %d, tier %s, image %q", err, h.wakes, r.tier(), r.image)
	}
	if tally.Load() != 0 {
		t.Errorf("%d hibernated counted after the wake, want 0", tally.Load())
	}
	release()
	if froze, _ := r.freezeIfIdle(ctx, time.Now().Add(time.Hour), time.Second); !froze {
		t.Fatal("the woken sandbox does not rest again")
	}
	if did, _ := r.hibernateIfIdle(ctx, time.Now().Add(2*time.Hour), time.Second); !did {
		t.Fatal("the woken sandbox does not hibernate again")
	}
	if tally.Load() != 1 {
		t.Errorf("%d hibernated counted after the second hibernation, want 1", tally.Load())
	}
	if got := r.retire(); got != "img-1" {
		t.Errorf("retire of a hibernated sandbox returned %q, want its image img-1", got)
	}
	if got := r.retire(); got != "" || tally.Load() != 0 {
		t.Errorf("after retire (twice): image %q, %d hibernated counted; want none", got, tally.Load())
	}
	if _, err := r.hold(ctx); !errors.Is(err, errEnding) || h.wakes != 1 {
		t.Errorf("a request to an ending sandbox: %v, wakes %d; want errEnding and no wake", err, h.wakes)
	}
	if err := r.wake(ctx); !errors.Is(err, errEnding) {
		t.Errorf("a lifecycle wake of an ending sandbox: %v, want errEnding", err)
	}
}

// A failed hibernation leaves the sandbox awake (the hibernator restored
// it) and not tried again at once.
func TestRestFailedHibernationRunsOn(t *testing.T) {
	fr := &fakeFreezer{frozen: true}
	h := &fakeHibernator{fr: fr, failSleep: errors.New("disk full")}
	now := time.Now()
	r := &rest{id: "sb", fr: fr, deep: h, frozen: true, last: now.Add(-2 * time.Hour)}
	if did, err := r.hibernateIfIdle(context.Background(), now, time.Hour); did || err == nil {
		t.Fatalf("hibernated %v, %v; want the error", did, err)
	}
	if r.tier() != RestAwake {
		t.Errorf("after a failed hibernation the sandbox is %s, want awake", r.tier())
	}
	if last, _ := r.idleSince(); !last.Equal(now) {
		t.Errorf("after a failed hibernation the idle clock is %v, want restarted at %v", last, now)
	}
}
