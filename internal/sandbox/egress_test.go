package sandbox

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/store"
)

// TestLookupsAcrossSandboxesDoNotWait: the egress set (refreshed by every
// create and resume before it answers) and a signed URL's sandbox are
// found from the records as last set, without waiting for a sandbox whose
// lock is held: a pause or kill holds it for seconds on a loaded host, and
// every resume and create waited for whichever was in progress.
func TestLookupsAcrossSandboxesDoNotWait(t *testing.T) {
	yes := true
	ip := func(s string) network.Endpoint { return network.Endpoint{SandboxIP: netip.MustParseAddr(s)} }
	svc := &Service{live: &liveSet{entries: map[string]*entry{
		"busy": (&entry{rec: &store.Sandbox{ID: "busy", State: store.StateRunning, AccessToken: "tb"}, ep: ip("10.0.0.2")}).published(),
		"open": (&entry{rec: &store.Sandbox{ID: "open", State: store.StateRunning, AccessToken: "to",
			Network: &store.NetworkPolicy{AllowInternet: &yes}}, ep: ip("10.0.0.6")}).published(),
		"off": (&entry{rec: &store.Sandbox{ID: "off", State: store.StateRunning, AccessToken: "tf",
			Network: &store.NetworkPolicy{AllowInternet: new(bool)}}, ep: ip("10.0.0.10")}).published(),
	}}}
	targets := NewTargets(svc)
	busy := svc.live.entries["busy"]
	busy.mu.Lock() // a pause in progress
	defer busy.mu.Unlock()

	done := make(chan struct{})
	var addrs []netip.Addr
	var found, foundBusy string
	go func() {
		defer close(done)
		addrs = NewEgress(svc).EgressAddrs()
		found, _ = targets.FindRunning(func(tok string) bool { return tok == "to" })
		foundBusy, _ = targets.FindRunning(func(tok string) bool { return tok == "tb" })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("EgressAddrs or FindRunning waited for a sandbox's lock")
	}
	// "busy" has no policy: no egress. A policy that allows the internet
	// puts its sandbox in the set; one that allows nothing does not.
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.6")}; !slices.Equal(addrs, want) {
		t.Errorf("EgressAddrs = %v, want %v", addrs, want)
	}
	if found != "open" || foundBusy != "busy" {
		t.Errorf("FindRunning = %q, %q; want open, busy", found, foundBusy)
	}

	// A record replaced under the lock (the pause recorded) is what the
	// lookups see next.
	paused := *busy.rec
	paused.State = store.StatePaused
	busy.setRec(&paused)
	if id, ok := targets.FindRunning(func(tok string) bool { return tok == "tb" }); ok {
		t.Errorf("FindRunning found paused sandbox %q", id)
	}
}

// TestEgressByAddr: the gateway learns whose a connection is from its
// source address: a running sandbox's id, tenant, policy and secret
// placeholders (copies: the gateway cannot change the record); a sandbox
// that is not running, and an address no sandbox has, are nobody's.
func TestEgressByAddr(t *testing.T) {
	yes := true
	ip := func(s string) network.Endpoint { return network.Endpoint{SandboxIP: netip.MustParseAddr(s)} }
	svc := &Service{log: slog.New(slog.DiscardHandler), live: &liveSet{entries: map[string]*entry{
		"run": (&entry{rec: &store.Sandbox{ID: "run", Tenant: "alice", State: store.StateRunning, Network: &store.NetworkPolicy{AllowInternet: &yes},
			Secrets: map[string]string{"ph": "alice/token"}}, ep: ip("10.0.0.2")}).published(),
		// A stored policy the parser refuses (set before a parser change,
		// or by hand): the gateway denies it everything.
		"unreadable": (&entry{rec: &store.Sandbox{ID: "unreadable", State: store.StateRunning, Network: &store.NetworkPolicy{AllowInternet: &yes, AllowOut: []string{"not a rule"}}},
			ep: ip("10.0.0.3")}).published(),
		"paused": (&entry{rec: &store.Sandbox{ID: "paused", State: store.StatePaused}, ep: ip("10.0.0.6")}).published(),
	}}}
	eg := NewEgress(svc)
	v, ok := eg.ByAddr(netip.MustParseAddr("10.0.0.2"))
	if !ok || v.ID != "run" || v.Tenant != "alice" || !v.Policy.Internet || v.Secrets["ph"] != "alice/token" {
		t.Fatalf("ByAddr(10.0.0.2) = %+v, %v; want run's view", v, ok)
	}
	v.Secrets["ph"] = "other"
	if rec := svc.live.entries["run"].record(); rec.Secrets["ph"] != "alice/token" {
		t.Errorf("changing the view changed the record: %+v", rec)
	}
	if v, ok := eg.ByAddr(netip.MustParseAddr("10.0.0.3")); !ok || v.ID != "unreadable" || v.Policy.Internet || len(v.Policy.Allow) > 0 {
		t.Errorf("ByAddr(10.0.0.3) = %+v, %v; want the sandbox with a policy that denies all", v, ok)
	}
	for _, addr := range []string{"10.0.0.6", "10.0.0.10"} {
		if v, ok := eg.ByAddr(netip.MustParseAddr(addr)); ok {
			t.Errorf("ByAddr(%s) = %+v, want nobody's", addr, v)
		}
	}
}

// TestEgressOnChange: a change before anyone watches is told to no one;
// each watcher added is told of every change after.
func TestEgressOnChange(t *testing.T) {
	svc := &Service{}
	svc.egressChanged() // the gateway not started yet: nothing to tell
	var first, second int
	eg := NewEgress(svc)
	eg.OnChange(func() { first++ })
	svc.egressChanged()
	eg.OnChange(func() { second++ })
	svc.egressChanged()
	if first != 2 || second != 1 {
		t.Fatalf("watchers told %d and %d times, want 2 and 1", first, second)
	}
}
