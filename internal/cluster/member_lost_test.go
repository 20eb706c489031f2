package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

type lostCatalog struct{ reports int }

func (c *lostCatalog) Register(context.Context, string, store.NodeInfo, time.Duration) (int64, error) {
	return 1, nil
}
func (c *lostCatalog) Renew(context.Context, int64, store.NodeInfo, time.Duration) error { return nil }
func (c *lostCatalog) ReportLost(context.Context) ([]*store.Sandbox, error) {
	c.reports++
	return nil, nil
}
func (c *lostCatalog) PruneIdempotency(context.Context, time.Time) error { return nil }

type idleNode struct{}

func (idleNode) Running() int                           { return 0 }
func (idleNode) PoolSizes() map[string]int              { return nil }
func (idleNode) Reconcile(context.Context) (int, error) { return 0, nil }

// TestLostHook: the Lost hook runs after a look for lapsed nodes, and
// not when this node has not held its own lease long enough to look.
func TestLostHook(t *testing.T) {
	ctx := context.Background()
	cat := &lostCatalog{}
	calls := 0
	m, err := Join(ctx, Config{Catalog: cat, Node: idleNode{}, ID: "n1", Lease: 10 * time.Millisecond, Lost: func(context.Context) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	m.reportLost(ctx) // joined just now: it may be the one that was away
	if cat.reports != 0 || calls != 0 {
		t.Fatalf("right after joining: %d reports, %d hook calls", cat.reports, calls)
	}
	time.Sleep(20 * time.Millisecond)
	m.reportLost(ctx)
	if cat.reports != 1 || calls != 1 {
		t.Fatalf("after a lease held: %d reports, %d hook calls; want 1, 1", cat.reports, calls)
	}
}
