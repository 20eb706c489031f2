package sandbox

import "log/slog"

// cleanup is a stack of undo steps for a multi-step setup: each step that
// succeeds pushes its undo, and run pops them all if a later step fails.
type cleanup struct {
	steps []step
}

type step struct {
	name string
	undo func() error
}

func (c *cleanup) add(name string, undo func() error) {
	c.steps = append(c.steps, step{name, undo})
}

func (c *cleanup) run(log *slog.Logger) {
	for i := len(c.steps) - 1; i >= 0; i-- {
		if err := c.steps[i].undo(); err != nil {
			log.Warn("cleanup step failed", "step", c.steps[i].name, "err", err)
		}
	}
	c.steps = nil
}
