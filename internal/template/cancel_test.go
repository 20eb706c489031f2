package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// TestCancelAnotherNodesBuild: a node cannot stop a build another node
// runs, so it does not mark it canceled (it would run on): it says where
// the build runs. Its own waiting build it cancels.
func TestCancelAnotherNodesBuild(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	st, err := store.OpenBolt(filepath.Join(tmp, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for id, node := range map[string]string{"theirs": "n2", "mine": "n1"} {
		if err := st.PutBuild(ctx, &store.Build{ID: id, Node: node, Template: "app", State: store.BuildQueued}, nil); err != nil {
			t.Fatal(err)
		}
	}
	agent := filepath.Join(tmp, "space-agent")
	if err := os.WriteFile(agent, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Config{Dir: filepath.Join(tmp, "templates"), WorkDir: filepath.Join(tmp, "work"), LogDir: filepath.Join(tmp, "logs"),
		Store: st, Agent: agent, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// New failed n1's queued build (a restart cut it off); queue it again.
	if err := st.PutBuild(ctx, &store.Build{ID: "mine", Node: "n1", Template: "app", State: store.BuildQueued}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelBuild(ctx, "theirs"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("cancel of n2's build on n1: %v, want failed precondition", err)
	}
	if b, _ := st.GetBuild(ctx, "theirs"); b.State != store.BuildQueued {
		t.Fatalf("n2's build after n1's cancel: %s", b.State)
	}
	if b, err := s.CancelBuild(ctx, "mine"); err != nil || b.State != BuildCanceled {
		t.Fatalf("cancel of n1's own build: %+v, %v", b, err)
	}
}
