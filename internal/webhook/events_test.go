package webhook

import (
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// TestDerive: the events each sequence of record writes makes.
func TestDerive(t *testing.T) {
	type write struct {
		state   string
		expires int // minutes
		ckpt    bool
		deleted bool
	}
	for _, tc := range []struct {
		name   string
		seeded string // a record seen at start, in this state
		writes []write
		want   []string
	}{
		{"life", "", []write{{state: "creating"}, {state: "running"}, {state: "running", expires: 5}, {state: "paused", ckpt: true},
			{state: "resuming", ckpt: true}, {state: "running", ckpt: true}, {state: "killed", ckpt: true}},
			[]string{Created, Updated, Paused, Resumed, Killed}},
		{"failed create says nothing", "", []write{{state: "creating"}, {deleted: true}}, nil},
		{"a claim from the pool is a create", "", []write{{state: "pooled"}, {state: "running"}, {state: "lost"}}, []string{Created, Killed}},
		{"a paused sandbox killed", "", []write{{state: "creating"}, {state: "running"}, {state: "paused", ckpt: true}, {state: "killed", ckpt: true}},
			[]string{Created, Paused, Killed}},
		{"killed once", "", []write{{state: "creating"}, {state: "running"}, {state: "killed"}, {deleted: true}}, []string{Created, Killed}},
		{"a write that changes nothing", "", []write{{state: "creating"}, {state: "running"}, {state: "running"}}, []string{Created}},
		{"seeded at a restart", "running", []write{{state: "running", expires: 5}, {state: "killed"}}, []string{Updated, Killed}},
		{"resumed here after a pause elsewhere", "", []write{{state: "resuming", ckpt: true}, {state: "running", ckpt: true}}, []string{Resumed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDeriver()
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			if tc.seeded != "" {
				d.seed(&store.Sandbox{ID: "s", State: tc.seeded, ExpiresAt: base})
			}
			var got []string
			for _, w := range tc.writes {
				rec := &store.Sandbox{ID: "s", State: w.state, ExpiresAt: base.Add(time.Duration(w.expires) * time.Minute), Template: "base"}
				if w.ckpt {
					rec.Checkpoint = &store.CheckpointRef{ID: "c"}
				}
				for _, p := range d.next(rec, w.deleted) {
					got = append(got, p.Type)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
		})
	}
}
