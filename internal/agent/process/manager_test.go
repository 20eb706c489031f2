package process

import (
	"context"
	"errors"
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

// StartOnce runs a keyed spec once: the same key and command again, even
// from many callers at once, answers the first process (replayed); the
// same key with another command is refused; another key, or the key once
// its process was forgotten, starts anew.
func TestStartOnce(t *testing.T) {
	m := NewManager(Options{ExitedTTL: 300 * time.Millisecond})
	spec := func(key, script string) Spec {
		return Spec{Key: key, Config: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
			Env: []string{"PATH=" + DefaultPath}, Dir: "/"}
	}
	first, replayed, err := m.StartOnce(spec("k1", "sleep 0.2"))
	if err != nil || replayed {
		t.Fatalf("first start: %v, replayed %v", err, replayed)
	}

	type answer struct {
		p        *Proc
		replayed bool
		err      error
	}
	answers := make(chan answer, 10)
	for range 10 {
		go func() {
			p, r, err := m.StartOnce(spec("k1", "sleep 0.2"))
			answers <- answer{p, r, err}
		}()
	}
	for range 10 {
		if a := <-answers; a.err != nil || !a.replayed || a.p != first {
			t.Errorf("a start again with k1: %v replayed %v pid %d, want pid %d replayed", a.err, a.replayed, pidOf(a.p), first.Pid())
		}
	}

	if _, _, err := m.StartOnce(spec("k1", "echo other")); !errors.Is(err, ErrExists) {
		t.Errorf("k1 with another command: %v, want ErrExists", err)
	}
	if p, r, err := m.StartOnce(spec("k2", "sleep 0.2")); err != nil || r || p == first {
		t.Errorf("another key: %v replayed %v, want a new process", err, r)
	}
	if p, r, err := m.StartOnce(spec("", "sleep 0.2")); err != nil || r || p == first {
		t.Errorf("no key: %v replayed %v, want a new process", err, r)
	}

	<-first.done
	time.Sleep(400 * time.Millisecond) // past ExitedTTL: forgotten
	if p, r, err := m.StartOnce(spec("k1", "sleep 0.2")); err != nil || r || p == first {
		t.Errorf("k1 after its process was forgotten: %v replayed %v, want a new process", err, r)
	}
}

func pidOf(p *Proc) uint32 {
	if p == nil {
		return 0
	}
	return p.Pid()
}

// Once a follower has seen a process's end event, input, resizes and
// stdin writes to it are not_found (envd's answer), never the
// failed_precondition of a pty or stdin already closed: the process is
// marked ended before its end event is buffered (CI once resized in the
// moment between the two).
func TestEndedProcessIsNotFound(t *testing.T) {
	m := NewManager(Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 50 {
		p, err := m.Start(Spec{
			Config: &process.ProcessConfig{Cmd: "/bin/true"},
			PTY:    &process.PTY_Size{Cols: 80, Rows: 24}, Stdin: true,
			Env: []string{"PATH=" + DefaultPath}, Dir: "/",
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Follow(ctx, 0, 0, func(Event) error { return nil }); err != nil {
			t.Fatal(err)
		}
		for name, call := range map[string]func() error{
			"resize":    func() error { return p.Resize(100, 30) },
			"pty input": func() error { return p.WritePTY([]byte("x")) },
			"stdin":     func() error { return p.WriteStdin([]byte("x")) },
		} {
			if err := call(); !errors.Is(err, ErrNotFound) {
				t.Fatalf("run %d: %s after the end event: %v, want not found", i, name, err)
			}
		}
	}
}
