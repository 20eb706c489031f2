package interpreter

import (
	"context"
	"testing"
	"time"
)

// Tickets get the turn in the order they joined, and one that leaves
// (waiting or holding) passes nothing out of order.
func TestTurnsOrder(t *testing.T) {
	var q turns
	first := q.join()
	if err := first.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	second, third := q.join(), q.join()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := second.wait(gone); err == nil {
		t.Fatal("a waiter whose context ended got the turn")
	}
	fourth := q.join()
	select {
	case <-third.ready:
		t.Fatal("the third got the turn while the first held it")
	default:
	}
	first.done()
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := third.wait(ctx); err != nil {
		t.Fatalf("the third did not get the turn after the first: %v", err)
	}
	select {
	case <-fourth.ready:
		t.Fatal("the fourth got the turn while the third held it")
	default:
	}
	third.leave() // holding: passes it on
	if err := fourth.wait(ctx); err != nil {
		t.Fatalf("the fourth did not get the turn: %v", err)
	}
	fourth.done()
	if q.held || len(q.queue) != 0 {
		t.Fatalf("queue left held=%v waiting=%d", q.held, len(q.queue))
	}
	// Free again: a new ticket holds it at once.
	select {
	case <-q.join().ready:
	default:
		t.Fatal("a free context did not give its turn at once")
	}
}
