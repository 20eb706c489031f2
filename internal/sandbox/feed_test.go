package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// TestFollowMetrics: a follower gets the newest sample of each running
// sandbox with its tenant, then every sample as it is taken; a paused
// sandbox's last sample is not in the snapshot; cancel closes the channel.
func TestFollowMetrics(t *testing.T) {
	svc := &Service{live: &liveSet{entries: map[string]*entry{}}}
	svc.live.entries["a"] = &entry{rec: &store.Sandbox{ID: "a", Tenant: "alpha", State: store.StateRunning, CPU: 1, MemoryMB: 256}}
	paused := &entry{rec: &store.Sandbox{ID: "p", Tenant: "beta", State: store.StateRunning, CPU: 1}}
	svc.live.entries["p"] = paused
	rd := fakeUsage{"a": {CPU: time.Millisecond}, "p": {CPU: time.Millisecond}}
	u := newUsage(svc, rd, 10*time.Millisecond)
	ctx := context.Background()
	u.tick(ctx, time.Now()) // baselines
	time.Sleep(15 * time.Millisecond)
	rd["a"] = runtime.Usage{CPU: 5 * time.Millisecond, Memory: 10 << 20}
	rd["p"] = runtime.Usage{CPU: 5 * time.Millisecond}
	u.tick(ctx, time.Now())
	paused.rec = &store.Sandbox{ID: "p", Tenant: "beta", State: store.StatePaused}

	now, next, cancel := u.follow()
	if len(now) != 1 || now[0].Sandbox != "a" || now[0].Tenant != "alpha" || now[0].MemUsed != 10<<20 {
		t.Fatalf("snapshot %+v, want a's sample only", now)
	}
	time.Sleep(15 * time.Millisecond)
	rd["a"] = runtime.Usage{CPU: 9 * time.Millisecond, Memory: 11 << 20}
	u.tick(ctx, time.Now())
	select {
	case m := <-next:
		if m.Sandbox != "a" || m.Tenant != "alpha" || m.MemUsed != 11<<20 || m.MemTotal != 256<<20 {
			t.Errorf("followed %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no sample followed")
	}
	cancel()
	if _, ok := <-next; ok {
		t.Error("the channel is open after cancel")
	}
	cancel() // twice is harmless
}

// TestFeedCutsOff: a subscriber that falls feedBuffer values behind is cut
// off (its channel closed after what it had), and the others go on; keyed
// subscribers get their key's values only.
func TestFeedCutsOff(t *testing.T) {
	var f feed[int]
	slow, _ := f.subscribe("")
	keyed, cancelKeyed := f.subscribe("x")
	defer cancelKeyed()
	for i := 0; i < feedBuffer+1; i++ {
		f.publish("y", i)
		if i%2 == 0 {
			f.publish("x", i)
		}
	}
	n := 0
	for range slow {
		n++
	}
	if n != feedBuffer {
		t.Errorf("the slow subscriber got %d values before its channel closed, want %d", n, feedBuffer)
	}
	f.publish("x", -1)
	for want := 0; ; want += 2 {
		if want > feedBuffer {
			want = -1
		}
		if v := <-keyed; v != want {
			t.Fatalf("keyed subscriber got %d, want %d", v, want)
		}
		if want == -1 {
			break
		}
	}
}

// TestFollowLines: a follower of a sandbox's log gets the newest lines the
// query selects, by time, then each new line of that sandbox (not of
// another), and its channel closes when the sandbox is forgotten.
func TestFollowLines(t *testing.T) {
	j := &journal{interval: time.Second, logs: map[string]*sandboxLog{}} // no service: lines only
	t0 := time.Now().UTC()
	for _, e := range []LogEntry{
		{Time: t0.Add(3 * time.Second), Level: "warn", Message: "third"},
		{Time: t0.Add(1 * time.Second), Level: "warn", Message: "first"}, // an agent line, read late
		{Time: t0.Add(2 * time.Second), Level: "error", Message: "second"},
		{Time: t0.Add(4 * time.Second), Level: "debug", Message: "quiet"},
	} {
		j.add("a", e)
	}
	now, next, cancel := j.followLines("a", LogQuery{Level: "warn", Limit: 2})
	defer cancel()
	if len(now) != 2 || now[0].Message != "second" || now[1].Message != "third" {
		t.Fatalf("followed from %+v, want second and third", now)
	}
	j.add("b", LogEntry{Time: t0, Level: "error", Message: "another sandbox's"})
	j.add("a", LogEntry{Time: t0.Add(5 * time.Second), Level: "info", Message: "new"})
	select {
	case e := <-next:
		if e.Message != "new" {
			t.Errorf("followed %+v, want the new line", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no new line followed")
	}
	j.forget("a")
	if e, ok := <-next; ok {
		t.Errorf("followed %+v after the sandbox was forgotten; want the channel closed", e)
	}
}
