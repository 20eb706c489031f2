package store

import (
	"encoding/json"
	"time"
)

// Build states.
const (
	// BuildWaiting: requested, its steps not given yet (E2B's two-call
	// build: request, then trigger).
	BuildWaiting  = "waiting"
	BuildQueued   = "queued"
	BuildBuilding = "building"
	BuildReady    = "ready"
	BuildError    = "error"
	// BuildCanceled: stopped by request or superseded.
	BuildCanceled = "canceled"
)

// Template is a name sandboxes are created from; its tags point at builds.
type Template struct {
	Name string `json:"name"`
	// Tenant owns the template (empty: the default tenant, whose
	// templates every tenant may use).
	Tenant    string                 `json:"tenant,omitempty"`
	Tags      map[string]TemplateTag `json:"tags"`
	CreatedAt time.Time              `json:"created_at"`
	UpdatedAt time.Time              `json:"updated_at"`
}

// TemplateTag points a tag at a ready build.
type TemplateTag struct {
	Build string    `json:"build"`
	At    time.Time `json:"at"`
}

// Build is one build of a template: its recipe, progress and result.
type Build struct {
	ID string `json:"id"`
	// Tenant started the build (empty: the default tenant).
	Tenant string `json:"tenant,omitempty"`
	// Node is the node that runs the build (a restart fails only its own).
	Node     string `json:"node,omitempty"`
	Template string `json:"template"`
	// Tags are set to this build when it is ready.
	Tags  []string `json:"tags"`
	State string   `json:"state"`
	// Recipe is the build's input (recipe.Recipe), stored as JSON so the
	// store needs no import of it. Registry credentials are never in it.
	Recipe json.RawMessage `json:"recipe,omitempty"`
	// Limits of the build's sandboxes and of the sandboxes made from it
	// (0: the node's defaults).
	CPU      int `json:"cpu,omitempty"`
	MemoryMB int `json:"memory_mb,omitempty"`
	DiskMB   int `json:"disk_mb,omitempty"`
	// Network is the egress policy of the build's steps.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Origin is "e2b" for builds requested through the E2B API.
	Origin     string    `json:"origin,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Step       int       `json:"step,omitempty"`  // the step running (1-based), or the last one
	Steps      int       `json:"steps,omitempty"` // how many
	// Layered counts the RUN and COPY steps, Cached those of them whose
	// layer was cached.
	Layered int         `json:"layered,omitempty"`
	Cached  int         `json:"cached,omitempty"`
	Error   *BuildErr   `json:"error,omitempty"`
	Result  *BuildImage `json:"result,omitempty"`
}

// BuildErr says why a build failed.
type BuildErr struct {
	// Step is the step that failed (1-based), 0 before the first one
	// (the source) and Steps+1 for the start command.
	Step     int      `json:"step"`
	Message  string   `json:"message"`
	ExitCode *int     `json:"exit_code,omitempty"`
	LogTail  []string `json:"log_tail,omitempty"`
}

// BuildImage is what a ready build made.
type BuildImage struct {
	// Image is the image directory sandboxes run on.
	Image string `json:"image"`
	// Key is the cache key of the last step's image.
	Key string `json:"key"`
	// Config is the env, workdir and user of the template (recipe.Config).
	Config json.RawMessage `json:"config"`
	// Base and Layers say how to make the image again on a node that
	// lacks it: the layers (cache keys, in the object store) applied in
	// order on the base image directory ("" for an empty one).
	Base   string   `json:"base,omitempty"`
	Layers []string `json:"layers,omitempty"`
	// Start is the key of the started template's checkpoint, when the
	// recipe has a start command.
	Start string `json:"start,omitempty"`
	// StartSpec is that start command and its ready check
	// (recipe.Start): a node whose runtime or agent differs from the ones
	// that took the checkpoint (it restores only into those) takes it
	// again from it. Builds made before it was recorded lack it.
	StartSpec json.RawMessage `json:"start_spec,omitempty"`
	// Bytes is what the image needs in the object store: its layers and
	// start checkpoint, each counted once, as stored.
	Bytes int64 `json:"bytes"`
}

// Final reports whether the build will not change any more.
func (b *Build) Final() bool {
	return b.State == BuildReady || b.State == BuildError || b.State == BuildCanceled
}
