package process

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/api/envd/process"
)

// A hidden process runs and ends like any other but no caller can find it.
func TestHiddenProcessIsNotRegistered(t *testing.T) {
	m := NewManager(Options{})
	p, err := m.Start(Spec{
		Config: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 0.2"}},
		Env:    []string{"PATH=" + DefaultPath}, Dir: "/", Hidden: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.List(); len(got) != 0 {
		t.Fatalf("List shows %d processes while the hidden one runs", len(got))
	}
	if _, err := m.Get(&process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: p.Pid()}}); err == nil {
		t.Fatal("Get found the hidden process by pid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var end *process.ProcessEvent_EndEvent
	if err := p.Follow(ctx, 0, 0, func(e Event) error {
		if e.Event.GetEnd() != nil {
			end = e.Event.GetEnd()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if end == nil || end.GetExitCode() != 0 {
		t.Fatalf("end event %v, want exit 0", end)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.exited) != 0 || len(m.procs) != 0 {
		t.Fatalf("the hidden process is kept: %d exited, %d registered", len(m.exited), len(m.procs))
	}
}
