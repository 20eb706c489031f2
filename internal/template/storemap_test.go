package template

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/store"
)

// The API answers a build's state as the domain spells it: a catalog
// that spelled a state otherwise would change the wire format.
func TestBuildStatesAreSpelledAsStored(t *testing.T) {
	for _, tc := range []struct {
		domain BuildState
		stored string
	}{
		{BuildWaiting, store.BuildWaiting},
		{BuildQueued, store.BuildQueued},
		{BuildBuilding, store.BuildBuilding},
		{BuildReady, store.BuildReady},
		{BuildError, store.BuildError},
		{BuildCanceled, store.BuildCanceled},
	} {
		if got := buildOf(&store.Build{State: tc.stored}).State; got != tc.domain {
			t.Errorf("a stored %q is %q, want %q", tc.stored, got, tc.domain)
		}
	}
}

func TestBuildOf(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	raw, err := json.Marshal(recipe.Recipe{Prelude: 2, Steps: []recipe.Step{{Workdir: "/a"}, {Workdir: "/b"}, {Run: &recipe.Run{Shell: "true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	code := 3
	for _, tc := range []struct {
		name   string
		stored store.Build
		want   Build
	}{
		{"waiting, no recipe yet",
			store.Build{ID: "b", Template: "app", Tags: []string{"default"}, State: store.BuildWaiting, CPU: 2, MemoryMB: 512, CreatedAt: at},
			Build{ID: "b", Template: "app", Tags: []string{"default"}, State: BuildWaiting, CPU: 2, MemoryMB: 512, CreatedAt: at}},
		{"failed",
			store.Build{ID: "b", State: store.BuildError, Recipe: raw, Step: 3, Steps: 3, Layered: 3, Cached: 1, StartedAt: at, FinishedAt: at,
				Error: &store.BuildErr{Step: 3, Message: "exit 3", ExitCode: &code, LogTail: []string{"x"}}},
			Build{ID: "b", State: BuildError, Prelude: 2, Step: 3, Steps: 3, Layered: 3, Cached: 1, StartedAt: at, FinishedAt: at,
				Error: &BuildFailure{Step: 3, Message: "exit 3", ExitCode: &code, LogTail: []string{"x"}}}},
		{"ready, started",
			store.Build{ID: "b", State: store.BuildReady, DiskMB: 64, Result: &store.BuildImage{Image: "i", Key: "k", Start: "s", Bytes: 9}},
			Build{ID: "b", State: BuildReady, DiskMB: 64, Result: &BuildResult{Image: "i", Bytes: 9, Started: true}}},
		{"ready, not started",
			store.Build{ID: "b", State: store.BuildReady, Result: &store.BuildImage{Image: "i"}},
			Build{ID: "b", State: BuildReady, Result: &BuildResult{Image: "i"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildOf(&tc.stored); !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("buildOf = %+v, want %+v", *got, tc.want)
			}
		})
	}
}
