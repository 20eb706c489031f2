package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Drain and live migration. A drained node takes no new sandboxes and
// moves each running one to another node: it pauses the sandbox to the
// object store (memory, processes and open files included), records the
// move in the catalog, and the target, told by a notification, resumes it
// under the same id, token, metadata and policy. A client that
// reconnects to a command's stream with Last-Event-ID loses no output:
// the output buffer is in the sandbox's memory.

// Movable is a running sandbox a drain moves, and the time it has left.
type Movable struct {
	ID   string
	Left time.Duration
}

// Sandboxes is this node's part in a drain (the daemon adapts
// sandbox.Service to it).
type Sandboxes interface {
	SetDraining(on bool)
	Movable() []Movable
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string, timeout time.Duration) error
}

// DrainCatalog is what a drain needs of the catalog (store.Postgres).
type DrainCatalog interface {
	Members(ctx context.Context) ([]store.Member, error)
	SetDraining(ctx context.Context, on bool) error
	PutMigration(ctx context.Context, m *store.Migration) error
	GetMigration(ctx context.Context, id string) (*store.Migration, error)
	FinishMigration(ctx context.Context, id, errText string) (bool, error)
	PendingMigrations(ctx context.Context) ([]string, error)
}

// Move is how one sandbox's move went.
type Move struct {
	Sandbox string `json:"sandbox"`
	To      string `json:"to"`
	// PauseMS is the pause on this node (checkpoint and upload),
	// ResumeMS the wait for the target to run it, TotalMS pause to
	// running: what the sandbox's users waited.
	PauseMS  int64  `json:"pause_ms"`
	ResumeMS int64  `json:"resume_ms"`
	TotalMS  int64  `json:"total_ms"`
	Error    string `json:"error,omitempty"`
}

// DrainReport is what a drain did.
type DrainReport struct {
	Node  string `json:"node"`
	Moves []Move `json:"moves"`
}

// Drainer runs drains of this node and the resumes other nodes' drains
// ask of it.
type Drainer struct {
	self  string
	cat   DrainCatalog
	boxes Sandboxes
	log   *slog.Logger
	// moveTimeout bounds the wait for a target to run a paused sandbox.
	moveTimeout time.Duration

	mu       sync.Mutex
	draining bool
	resuming map[string]bool
}

// NewDrainer makes the node's drainer.
func NewDrainer(self string, cat DrainCatalog, boxes Sandboxes, log *slog.Logger) *Drainer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Drainer{self: self, cat: cat, boxes: boxes, log: log.With("node", self), moveTimeout: 2 * time.Minute, resuming: map[string]bool{}}
}

// Self is this node's id.
func (d *Drainer) Self() string { return d.self }

// Members lists the cluster's nodes.
func (d *Drainer) Members(ctx context.Context) ([]store.Member, error) { return d.cat.Members(ctx) }

// Drain stops this node taking new sandboxes and moves its running ones
// to the other live nodes that are not draining, the least loaded first,
// one at a time. A sandbox whose move fails stays paused (any node can
// resume it) and the report says why. The node stays draining until
// Undrain.
func (d *Drainer) Drain(ctx context.Context) (*DrainReport, error) {
	d.mu.Lock()
	if d.draining {
		d.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "node %s is draining already", d.self)
	}
	d.draining = true
	d.mu.Unlock()
	done := false
	defer func() {
		if !done {
			d.mu.Lock()
			d.draining = false
			d.mu.Unlock()
		}
	}()
	members, err := d.cat.Members(ctx)
	if err != nil {
		return nil, err
	}
	load := map[string]int{}
	for _, m := range members {
		if m.Alive && !m.Draining && m.ID != d.self {
			load[m.ID] = m.Info.Sandboxes
		}
	}
	if len(load) == 0 {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "no other live node that is not draining can take node %s's sandboxes", d.self)
	}
	if err := d.cat.SetDraining(ctx, true); err != nil {
		return nil, err
	}
	d.boxes.SetDraining(true)
	done = true
	report := &DrainReport{Node: d.self, Moves: []Move{}}
	for _, sb := range d.boxes.Movable() {
		to := leastLoaded(load)
		mv := d.move(ctx, sb, to)
		if mv.Error == "" {
			load[to]++
		}
		d.log.Info("sandbox moved", "sandbox", sb.ID, "to", to, "pause_ms", mv.PauseMS, "resume_ms", mv.ResumeMS, "total_ms", mv.TotalMS, "err", mv.Error)
		report.Moves = append(report.Moves, mv)
	}
	return report, nil
}

// Undrain lets the node take sandboxes again.
func (d *Drainer) Undrain(ctx context.Context) error {
	if err := d.cat.SetDraining(ctx, false); err != nil {
		return err
	}
	d.boxes.SetDraining(false)
	d.mu.Lock()
	d.draining = false
	d.mu.Unlock()
	return nil
}

func leastLoaded(load map[string]int) string {
	ids := make([]string, 0, len(load))
	for id := range load {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if load[a] != load[b] {
			return load[a] - load[b]
		}
		if a < b {
			return -1
		}
		return 1
	})
	return ids[0]
}

func (d *Drainer) move(ctx context.Context, sb Movable, to string) Move {
	mv := Move{Sandbox: sb.ID, To: to}
	start := time.Now()
	fail := func(format string, args ...any) Move {
		mv.Error = fmt.Sprintf(format, args...)
		mv.TotalMS = time.Since(start).Milliseconds()
		return mv
	}
	m := &store.Migration{Sandbox: sb.ID, From: d.self, To: to, Timeout: sb.Left, Requested: start.UTC()}
	if err := d.cat.PutMigration(ctx, m); err != nil {
		return fail("record the move: %s", errdefs.PublicMessage(err))
	}
	if err := d.boxes.Pause(ctx, sb.ID); err != nil {
		return fail("pause: %s", errdefs.PublicMessage(err))
	}
	paused := time.Now()
	mv.PauseMS = paused.Sub(start).Milliseconds()
	m.Paused = paused.UTC()
	if err := d.cat.PutMigration(ctx, m); err != nil {
		return fail("hand the paused sandbox to %s: %s (it stays paused; any node can resume it)", to, errdefs.PublicMessage(err))
	}
	deadline := time.Now().Add(d.moveTimeout)
	for {
		got, err := d.cat.GetMigration(ctx, sb.ID)
		switch {
		case err == nil && got.Error != "":
			return fail("%s could not resume it: %s (it stays paused; any node can resume it)", to, got.Error)
		case err == nil && !got.Resumed.IsZero():
			mv.ResumeMS = time.Since(paused).Milliseconds()
			mv.TotalMS = time.Since(start).Milliseconds()
			return mv
		case time.Now().After(deadline):
			return fail("%s did not resume it within %s (it stays paused; any node can resume it)", to, d.moveTimeout)
		case ctx.Err() != nil:
			return fail("the drain was cancelled: %v", ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Run looks for migrations waiting for this node every interval until
// ctx ends: a notification missed while the listener was away (or lost
// with a connection) is never sent again.
func (d *Drainer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.Rescan(ctx)
		}
	}
}

// Rescan resumes every sandbox paused to move to this node that is not
// resumed yet (MigrationRequested for each).
func (d *Drainer) Rescan(ctx context.Context) {
	ids, err := d.cat.PendingMigrations(ctx)
	if err != nil {
		d.log.Warn("look for migrations waiting for this node", "err", err)
		return
	}
	for _, id := range ids {
		d.log.Debug("a migration waits for this node", "sandbox", id)
		d.MigrationRequested(ctx, id)
	}
}

// MigrationRequested is the catalog's notification that sandbox id was
// paused to move; the node it names resumes it.
func (d *Drainer) MigrationRequested(ctx context.Context, id string) {
	d.mu.Lock()
	if d.resuming[id] {
		d.mu.Unlock()
		return
	}
	d.resuming[id] = true
	d.mu.Unlock()
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.resuming, id)
			d.mu.Unlock()
		}()
		m, err := d.cat.GetMigration(ctx, id)
		if err != nil || m.To != d.self || m.Paused.IsZero() || !m.Resumed.IsZero() || m.Error != "" {
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				d.log.Warn("read a migration", "sandbox", id, "err", err)
			}
			return
		}
		errText := ""
		if err := d.boxes.Resume(ctx, id, m.Timeout); err != nil {
			errText = errdefs.PublicMessage(err)
			d.log.Warn("resume a moved sandbox", "sandbox", id, "from", m.From, "err", err)
		}
		if _, err := d.cat.FinishMigration(ctx, id, errText); err != nil {
			d.log.Warn("record a migration's end", "sandbox", id, "err", err)
		}
	}()
}
