package template

import "time"

// BuildState is where a build is.
type BuildState string

// Build states.
const (
	// BuildWaiting: requested, its steps not given yet (E2B's two-call
	// build: request, then trigger).
	BuildWaiting  BuildState = "waiting"
	BuildQueued   BuildState = "queued"
	BuildBuilding BuildState = "building"
	BuildReady    BuildState = "ready"
	BuildError    BuildState = "error"
	// BuildCanceled: stopped by request or superseded.
	BuildCanceled BuildState = "canceled"
)

// Build is what callers see of one build of a template.
type Build struct {
	ID       string
	Template string
	// Tags are set to this build when it is ready.
	Tags  []string
	State BuildState
	// Limits of the build's sandboxes and of those made from it (0: the
	// node's defaults).
	CPU, MemoryMB, DiskMB int
	CreatedAt             time.Time
	StartedAt             time.Time
	FinishedAt            time.Time
	// Step is the step running (1-based), or the last one, of Steps.
	Step, Steps int
	// Prelude counts the first steps that are the platform's, not the
	// recipe author's (recipe.Recipe.Prelude).
	Prelude int
	// Layered counts the RUN and COPY steps, Cached those of them whose
	// layer was cached.
	Layered, Cached int
	// Error says why it failed or was canceled; Result what it made.
	Error  *BuildFailure
	Result *BuildResult
}

// BuildFailure says why a build failed.
type BuildFailure struct {
	// Step is the step that failed (1-based), 0 before the first one
	// (the source) and Steps+1 for the start command.
	Step     int
	Message  string
	ExitCode *int
	LogTail  []string
}

// BuildResult is what a ready build made.
type BuildResult struct {
	// Image is the image directory sandboxes run on.
	Image string
	// Bytes is what the image needs in the object store.
	Bytes int64
	// Started: the template was started and checkpointed (its recipe
	// has a start command), so sandboxes resume it.
	Started bool
}
