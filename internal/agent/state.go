package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/spacesandbox/space/internal/agent/users"
)

// State is what Init sets. It is persisted so a restarted agent resumes it.
type State struct {
	Token          string            `json:"token"`
	EnvVars        map[string]string `json:"env_vars,omitempty"`
	DefaultUser    string            `json:"default_user,omitempty"`
	DefaultWorkdir string            `json:"default_workdir,omitempty"`
}

// stateStore guards the current State and its file.
type stateStore struct {
	path string // empty: not persisted

	mu sync.RWMutex
	s  State
}

// loadState prefers the persisted state; without one it starts from boot.
func loadState(path string, boot State) (*stateStore, bool, error) {
	st := &stateStore{path: path, s: boot}
	if path == "" {
		return st, false, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, false, fmt.Errorf("parse state %s: %w", path, err)
	}
	if s.DefaultUser == "" {
		s.DefaultUser = boot.DefaultUser
	}
	st.s = s
	return st, true, nil
}

func (st *stateStore) get() State {
	st.mu.RLock()
	defer st.mu.RUnlock()
	s := st.s
	s.EnvVars = maps.Clone(s.EnvVars)
	return s
}

func (st *stateStore) token() string {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.s.Token
}

func (st *stateStore) defaults() users.Defaults {
	s := st.get()
	return users.Defaults{User: s.DefaultUser, Workdir: s.DefaultWorkdir, Env: s.EnvVars}
}

// set persists s, then makes it current, so a crash never leaves a token in
// use that a restarted agent would not know.
func (st *stateStore) set(s State) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.path != "" {
		if err := writeState(st.path, s); err != nil {
			return err
		}
	}
	st.s = s
	return nil
}

func writeState(path string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("chmod state dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("create state file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod state file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write state file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync state file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close state file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install state file: %w", err)
	}
	return nil
}
