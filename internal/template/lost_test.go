package template

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// TestFailBuildsOfLostNodes: the queued and running builds of a node the
// cluster lost end failed, saying so; this node's, other nodes', waiting
// and finished builds stay as they are.
func TestFailBuildsOfLostNodes(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, func(c *Config) { c.Node = "n1" })
	put := func(id, node, state string) {
		if err := e.st.PutBuild(ctx, &store.Build{ID: id, Node: node, Template: "app", State: state, Step: 2, CreatedAt: time.Now()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("lost-building", "n2", store.BuildBuilding)
	put("lost-queued", "n2", store.BuildQueued)
	put("lost-waiting", "n2", store.BuildWaiting)
	put("lost-ready", "n2", store.BuildReady)
	put("mine", "n1", store.BuildBuilding)
	put("alive", "n3", store.BuildBuilding)
	n, err := e.s.FailBuildsOfLostNodes(ctx, []string{"n2", "n1"})
	if err != nil || n != 2 {
		t.Fatalf("failed %d (%v), want 2", n, err)
	}
	for id, want := range map[string]string{
		"lost-building": store.BuildError, "lost-queued": store.BuildError, "lost-waiting": store.BuildWaiting,
		"lost-ready": store.BuildReady, "mine": store.BuildBuilding, "alive": store.BuildBuilding,
	} {
		b, err := e.st.GetBuild(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != want {
			t.Errorf("%s: %s, want %s", id, b.State, want)
		}
		if want == store.BuildError && (b.Error == nil || b.Error.Step != 2 || !strings.Contains(b.Error.Message, "node n2 was lost") || b.FinishedAt.IsZero()) {
			t.Errorf("%s: error %+v", id, b.Error)
		}
	}
}

// TestBuildEndedElsewhere: a build this node runs whose record another
// node ended (it reported this one lost) is stopped at its next step, and
// its end here neither overwrites that record nor moves a tag.
func TestBuildEndedElsewhere(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, func(c *Config) { c.Node = "n1" })
	b := &store.Build{ID: "b", Node: "n1", Template: "app", Tags: []string{"default"}, State: store.BuildBuilding, CreatedAt: time.Now()}
	if err := e.st.PutBuild(ctx, b, &store.Template{Name: "app", Tags: map[string]store.TemplateTag{}}); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.s.mu.Lock()
	e.s.active[b.ID] = &active{cancel: cancel}
	e.s.mu.Unlock()

	e.s.progress(b.ID, 1, 0)
	if bctx.Err() != nil {
		t.Fatal("a build still its own was stopped")
	}
	ended := *b
	ended.State, ended.Error = store.BuildError, &store.BuildErr{Message: "the build's node n1 was lost"}
	if err := e.st.PutBuild(ctx, &ended, nil); err != nil {
		t.Fatal(err)
	}
	e.s.progress(b.ID, 2, 0)
	if !errors.Is(context.Cause(bctx), errEnded) {
		t.Fatalf("the build was not stopped: cause %v", context.Cause(bctx))
	}

	// It finished anyway (the stop came late): the record stands.
	b.Result = &store.BuildImage{Image: "i-x", Layers: []string{key('a')}}
	e.s.finish(ctx, b, nil, slog.Default())
	got, err := e.st.GetBuild(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.BuildError || got.Result != nil {
		t.Errorf("the record became %s with result %+v", got.State, got.Result)
	}
	if tpl, err := e.st.GetTemplate(ctx, "app"); err != nil || len(tpl.Tags) != 0 {
		t.Errorf("a tag moved: %+v, %v", tpl, err)
	}
}
