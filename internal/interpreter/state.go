package interpreter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"
)

// agentState is what this server reads of the agent's state file
// (internal/agent.State, written by every Init): the sandbox's access
// token and its env vars. Both change whenever a sandbox restored from a
// template's checkpoint is handed to a caller, so they are read per
// request rather than at start.
type agentState struct {
	Token   string            `json:"token"`
	EnvVars map[string]string `json:"env_vars,omitempty"`
}

// stateFile reads the agent's state file, again only when its mtime or
// size changed: a stat per request, and the file is replaced by rename.
type stateFile struct {
	path string

	mu      sync.Mutex
	mtime   time.Time
	size    int64
	ino     uint64
	current agentState
	version uint64 // bumped whenever the contents change
}

var errNoState = errors.New("the sandbox's agent state is not readable")

// get returns the current state and a version that changes with it.
func (f *stateFile) get() (agentState, uint64, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return agentState{}, 0, fmt.Errorf("%w: %w", errNoState, err)
	}
	ino := inode(fi)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.version > 0 && fi.ModTime().Equal(f.mtime) && fi.Size() == f.size && ino == f.ino {
		return f.current, f.version, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return agentState{}, 0, fmt.Errorf("%w: %w", errNoState, err)
	}
	var s agentState
	if err := json.Unmarshal(b, &s); err != nil {
		return agentState{}, 0, fmt.Errorf("%w: parse %s: %w", errNoState, f.path, err)
	}
	if f.version == 0 || s.Token != f.current.Token || !maps.Equal(s.EnvVars, f.current.EnvVars) {
		f.version++
	}
	f.mtime, f.size, f.ino, f.current = fi.ModTime(), fi.Size(), ino, s
	return s, f.version, nil
}
