package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openGroup(t *testing.T) *groupCommit {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "g.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		t.Fatal(err)
	}
	return &groupCommit{db: db}
}

// Concurrent writes all land, in fewer commits than writes, and a write
// that fails (or panics) gets its own error without failing the others.
func TestGroupCommit(t *testing.T) {
	tests := []struct {
		name    string
		writers int
		fail    map[int]string // writer -> "error" or "panic"
	}{
		{name: "one writer", writers: 1},
		{name: "many writers", writers: 64},
		{name: "some fail", writers: 64, fail: map[int]string{3: "error", 17: "panic", 40: "error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := openGroup(t)
			errs := make([]error, tt.writers)
			var wg sync.WaitGroup
			for i := range tt.writers {
				wg.Go(func() {
					errs[i] = g.do(func(tx *bolt.Tx) error {
						if err := tx.Bucket([]byte("b")).Put(fmt.Appendf(nil, "k%03d", i), []byte("v")); err != nil {
							return err
						}
						switch tt.fail[i] {
						case "error":
							return errors.New("refused")
						case "panic":
							panic("bad write")
						}
						return nil
					})
				})
			}
			wg.Wait()
			err := g.db.View(func(tx *bolt.Tx) error {
				for i := range tt.writers {
					got := tx.Bucket([]byte("b")).Get(fmt.Appendf(nil, "k%03d", i))
					if want := tt.fail[i] == ""; (got != nil) != want || (errs[i] == nil) != want {
						t.Errorf("writer %d: stored %v, error %v (should fail: %q)", i, got != nil, errs[i], tt.fail[i])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// The goroutine a commit handed on to may still be finishing.
			deadline := time.Now().Add(5 * time.Second)
			g.mu.Lock()
			for g.running && time.Now().Before(deadline) {
				g.mu.Unlock()
				time.Sleep(time.Millisecond)
				g.mu.Lock()
			}
			commits, running, pending := g.commits, g.running, len(g.pending)
			g.mu.Unlock()
			if tt.writers > 1 && commits >= tt.writers+len(tt.fail) {
				t.Errorf("%d commits for %d concurrent writes: nothing was shared", commits, tt.writers)
			}
			if running || pending != 0 {
				t.Errorf("left running=%v with %d pending", running, pending)
			}
		})
	}
}
