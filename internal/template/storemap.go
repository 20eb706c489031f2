package template

import (
	"encoding/json"
	"slices"

	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/store"
)

// This file is the one place where the catalog's build rows become what
// the package hands its callers: a change of the stored schema ends here.

// buildOf is what callers see of a stored build (a copy: the record may
// go on changing under a running build).
func buildOf(b *store.Build) *Build {
	out := &Build{
		ID: b.ID, Template: b.Template, Tags: slices.Clone(b.Tags), State: BuildState(b.State),
		CPU: b.CPU, MemoryMB: b.MemoryMB, DiskMB: b.DiskMB,
		CreatedAt: b.CreatedAt, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
		Step: b.Step, Steps: b.Steps, Prelude: preludeOf(b.Recipe), Layered: b.Layered, Cached: b.Cached,
	}
	if e := b.Error; e != nil {
		out.Error = &BuildFailure{Step: e.Step, Message: e.Message, ExitCode: e.ExitCode, LogTail: slices.Clone(e.LogTail)}
	}
	if r := b.Result; r != nil {
		out.Result = &BuildResult{Image: r.Image, Bytes: r.Bytes, Started: r.Start != ""}
	}
	return out
}

// preludeOf is the Prelude of a stored recipe (0 when there is none
// yet, or it cannot be read).
func preludeOf(raw json.RawMessage) int {
	var r recipe.Recipe
	if json.Unmarshal(raw, &r) != nil {
		return 0
	}
	return r.Prelude
}
