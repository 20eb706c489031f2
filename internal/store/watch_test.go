package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestWatched(t *testing.T) {
	bolt, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	w := Watch(bolt)
	ctx := context.Background()
	start := w.LastSandboxChange()

	rec := &Sandbox{ID: "a", State: StateCreating, CreatedAt: time.Now()}
	if err := w.CreateSandbox(ctx, rec, 16, nil); err != nil {
		t.Fatal(err)
	}
	run := *rec
	run.State = StateRunning
	if err := w.UpdateSandbox(ctx, &run, Was(rec)); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteSandbox(ctx, "a", Was(&run)); err != nil {
		t.Fatal(err)
	}
	if err := w.UpdateSandbox(ctx, &Sandbox{ID: "missing"}, Expect{}); err == nil {
		t.Fatal("update of a missing record succeeded")
	}

	for _, tc := range []struct {
		name   string
		after  uint64
		states []string
		gap    bool
	}{
		{"from the start", start, []string{StateCreating, StateRunning, StateRunning}, false},
		{"after the first", start + 1, []string{StateRunning, StateRunning}, false},
		{"not one of ours (a restart)", start + 99, nil, true},
		{"older than kept", start - 1, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gap, err := w.SandboxChangesAfter(ctx, tc.after)
			if err != nil || gap != tc.gap || len(got) != len(tc.states) {
				t.Fatalf("got %d changes, gap %v, err %v; want %d, gap %v", len(got), gap, err, len(tc.states), tc.gap)
			}
			for i, c := range got {
				if c.Sandbox.State != tc.states[i] || c.Seq != tc.after+uint64(i)+1 {
					t.Errorf("change %d: seq %d state %s", i, c.Seq, c.Sandbox.State)
				}
			}
			if n := len(got); n > 0 && !got[n-1].Deleted {
				t.Errorf("the last change is not the deletion")
			}
		})
	}

	// A reader at the end waits for the next change, or its context.
	last := w.LastSandboxChange()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, err := w.SandboxChangesAfter(short, last); err == nil {
		t.Fatal("a reader with nothing new did not wait")
	}
	done := make(chan []SandboxChange)
	go func() {
		got, _, _ := w.SandboxChangesAfter(ctx, last)
		done <- got
	}()
	time.Sleep(10 * time.Millisecond)
	w.CreateSandbox(ctx, &Sandbox{ID: "b", State: StateRunning}, 16, nil)
	select {
	case got := <-done:
		if len(got) != 1 || got[0].Sandbox.ID != "b" {
			t.Fatalf("woke with %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting reader was not woken")
	}
}

func TestWatchedRing(t *testing.T) {
	bolt, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	w := Watch(bolt)
	start := w.LastSandboxChange()
	rec := &Sandbox{ID: "a", State: StateRunning}
	for i := 0; i < watchRing+5; i++ {
		w.publish(rec, false)
	}
	if _, gap, _ := w.SandboxChangesAfter(context.Background(), start); !gap {
		t.Error("changes that fell out of the ring were not reported as a gap")
	}
	got, gap, _ := w.SandboxChangesAfter(context.Background(), start+5)
	if gap || len(got) != watchRing {
		t.Errorf("from the oldest kept: %d changes, gap %v", len(got), gap)
	}
}
