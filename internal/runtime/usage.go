package runtime

import (
	"context"
	"time"
)

// Usage is what one sandbox uses of the host at one instant, read from
// outside the sandbox (so what it cannot hide or fake).
type Usage struct {
	// CPU is the CPU time the sandbox has used since it started
	// (cumulative; a restored sandbox starts again from zero).
	CPU time.Duration
	// Memory is what the sandbox holds that the host cannot take back:
	// its processes' memory and the engine's own, not the page cache of
	// its files.
	Memory uint64
	// MemoryCache is the page cache of its files (reclaimable).
	MemoryCache uint64
	// Disk is how much of its writable layer it fills.
	Disk uint64
	// Files is what its directory on the host takes besides (bundle,
	// logs): with Disk, what the sandbox costs the node's disk.
	Files uint64
}

// UsageReader is implemented by runtimes that can read a running
// sandbox's usage; it is meant to be cheap enough to call every few
// seconds for every sandbox (the metrics sampler and admission control
// both do). A sandbox without its cgroups (half made, or gone) is
// ErrNotFound.
type UsageReader interface {
	Usage(ctx context.Context, id string) (Usage, error)
}
