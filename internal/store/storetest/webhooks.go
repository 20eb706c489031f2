package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testWebhooks: registrations are kept and replaced; the queue answers in
// the order it was filled, a delivery leaves it when deleted, and a
// webhook's deletion takes its queued deliveries with it.
func testWebhooks(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	a := &store.Webhook{ID: "wa", Tenant: "t1", Name: "a", URL: "http://x/a", Enabled: true,
		Events: []string{"sandbox.lifecycle.created"}, CreatedAt: now, SealedSecret: []byte{1, 2}}
	b := &store.Webhook{ID: "wb", Tenant: "t2", Name: "b", URL: "http://x/b", CreatedAt: now}
	for _, w := range []*store.Webhook{a, b} {
		if err := c.PutWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	a.Enabled = false
	if err := c.PutWebhook(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetWebhook(ctx, "wa")
	if err != nil || got.Enabled || got.Tenant != "t1" || string(got.SealedSecret) != "\x01\x02" {
		t.Fatalf("get wa = %+v, %v", got, err)
	}
	if _, err := c.GetWebhook(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get missing: %v, want not found", err)
	}
	all, err := c.ListWebhooks(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list = %d, %v", len(all), err)
	}

	var ds []*store.WebhookDelivery
	for i, w := range []string{"wa", "wb", "wa", "wb"} {
		ds = append(ds, &store.WebhookDelivery{Webhook: w, Sandbox: "s", EventID: string(rune('0' + i)), Body: []byte(`{}`), CreatedAt: now})
	}
	if err := c.EnqueueWebhookDeliveries(ctx, ds[:2]); err != nil {
		t.Fatal(err)
	}
	if err := c.EnqueueWebhookDeliveries(ctx, ds[2:]); err != nil {
		t.Fatal(err)
	}
	q, err := c.WebhookDeliveries(ctx)
	if err != nil || len(q) != 4 {
		t.Fatalf("queue = %d, %v", len(q), err)
	}
	for i, d := range q {
		if d.EventID != ds[i].EventID || d.Seq != ds[i].Seq || (i > 0 && d.Seq <= q[i-1].Seq) {
			t.Fatalf("queue[%d] = %+v, want event %s in order", i, d, ds[i].EventID)
		}
	}
	if err := c.DeleteWebhookDelivery(ctx, q[1].Seq); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteWebhook(ctx, "wa"); err != nil {
		t.Fatal(err)
	}
	q, err = c.WebhookDeliveries(ctx)
	if err != nil || len(q) != 1 || q[0].EventID != "3" {
		t.Fatalf("queue after deletes = %+v, %v; want event 3 alone", q, err)
	}
	if err := c.DeleteWebhook(ctx, "wa"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}
