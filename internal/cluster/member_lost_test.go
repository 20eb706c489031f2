package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// TestLostHook: the Lost hook runs after this node looked for lapsed
// nodes, not when it may itself be the one that was away (it just
// joined), and by then the catalog lists the lapsed node as not alive
// (what the daemon's hook fails that node's builds by).
func TestLostHook(t *testing.T) {
	url := newCatalog(t)
	a, b := openNode(t, url, "a"), openNode(t, url, "b")
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	if _, err := b.Register(ctx, store.Registration{Address: "http://b", TTL: lease}); err != nil {
		t.Fatal(err)
	}
	var seen [][]string
	m, err := Join(ctx, Config{Catalog: a, Node: &fakeNode{}, ID: "a", Address: "http://a", Lease: lease, Lost: func(ctx context.Context) {
		ms, err := a.Members(ctx)
		if err != nil {
			t.Error(err)
		}
		var lost []string
		for _, m := range ms {
			if !m.Alive {
				lost = append(lost, m.ID)
			}
		}
		seen = append(seen, lost)
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.reportLost(ctx)
	if len(seen) != 0 {
		t.Fatalf("the hook ran right after joining: %v", seen)
	}
	// a renews its lease; b does not.
	for end := time.Now().Add(lease + 200*time.Millisecond); time.Now().Before(end); time.Sleep(lease / 4) {
		m.renew(ctx)
	}
	m.reportLost(ctx)
	if len(seen) != 1 || !slices.Equal(seen[0], []string{"b"}) {
		t.Fatalf("the hook saw %v, want one look with b lost", seen)
	}
}
