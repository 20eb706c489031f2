package process

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/api/envd/process"
)

func data(n int) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: stdoutData(make([]byte, n))}}
}

func TestBuffer(t *testing.T) {
	start := &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 1}}}
	end := &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{Exited: true}}}
	tests := []struct {
		name     string
		limit    int
		sizes    []int
		after    uint64
		wantSeqs []uint64
		dropped  map[uint64]uint64 // seq -> Dropped
	}{
		{name: "all kept", limit: 100, sizes: []int{10, 10, 10}, wantSeqs: []uint64{1, 2, 3, 4, 5}},
		{name: "after", limit: 100, sizes: []int{10, 10, 10}, after: 3, wantSeqs: []uint64{4, 5}},
		{name: "after end", limit: 100, sizes: []int{10}, after: 3, wantSeqs: nil},
		{name: "oldest dropped", limit: 25, sizes: []int{10, 10, 10, 10}, wantSeqs: []uint64{1, 4, 5, 6}, dropped: map[uint64]uint64{4: 2}},
		{name: "oldest dropped after", limit: 25, sizes: []int{10, 10, 10, 10}, after: 2, wantSeqs: []uint64{4, 5, 6}, dropped: map[uint64]uint64{4: 1}},
		{name: "chunk over limit", limit: 5, sizes: []int{10, 10}, wantSeqs: []uint64{1, 4}, dropped: map[uint64]uint64{4: 2}},
		{name: "compaction", limit: 10, sizes: make([]int, 500), wantSeqs: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBuffer(tt.limit)
			b.add(start, 0)
			for _, n := range tt.sizes {
				b.add(data(n), n)
			}
			b.add(end, 0)
			b.add(data(1), 1) // ignored after the end
			if b.dataBytes() > tt.limit || !b.ended() {
				t.Fatalf("bytes %d ended %v", b.dataBytes(), b.ended())
			}
			p := &Proc{buf: b}
			var got []Event
			err := p.Follow(context.Background(), tt.after, time.Minute, func(e Event) error { got = append(got, e); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "compaction" {
				if len(got) != 502 || got[len(got)-1].Event.GetEnd() == nil {
					t.Fatalf("got %d events", len(got))
				}
				return
			}
			if len(got) != len(tt.wantSeqs) {
				t.Fatalf("got %v", got)
			}
			for i, e := range got {
				if e.Seq != tt.wantSeqs[i] || e.Dropped != tt.dropped[e.Seq] {
					t.Errorf("event %d: seq %d dropped %d", i, e.Seq, e.Dropped)
				}
			}
		})
	}
}

func TestFollowLiveAndKeepalive(t *testing.T) {
	b := newBuffer(100)
	b.add(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 1}}}, 0)
	p := &Proc{buf: b}
	got := make(chan Event, 10)
	done := make(chan error, 1)
	go func() {
		done <- p.Follow(context.Background(), 0, 20*time.Millisecond, func(e Event) error { got <- e; return nil })
	}()
	if e := <-got; e.Seq != 1 {
		t.Fatalf("first %v", e)
	}
	if e := <-got; e.Seq != 0 || e.Event.GetKeepalive() == nil {
		t.Fatalf("want keepalive, got %v", e)
	}
	b.add(data(3), 3)
	for e := range got {
		if e.Seq == 2 {
			break
		}
	}
	b.add(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{}}}, 0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
