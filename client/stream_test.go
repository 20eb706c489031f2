package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// collect reads a stream to its end and returns stdout, the exit and the error.
func collect(s *CommandStream) (string, *ExitInfo, []uint64, error) {
	var out strings.Builder
	var exit *ExitInfo
	var ids []uint64
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return out.String(), exit, ids, nil
		}
		if err != nil {
			return out.String(), exit, ids, err
		}
		ids = append(ids, ev.ID)
		if ev.Type == EventStdout {
			out.Write(ev.Data)
		}
		if ev.Exit != nil {
			exit = ev.Exit
		}
	}
}

func TestRunCommandStream(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		s := startSSE(w)
		s.event(1, "start", `{"pid":12}`)
		s.raw(": keepalive\n\n")
		s.event(2, "stdout", `{"text":"hel"}`)
		s.raw("id: 3\nevent: stdout\ndata: {\"base64\":\n")
		s.raw("data: \"bG8=\"}\n\n") // multi-line JSON data
		s.event(4, "stderr", `{"text":"warn"}`)
		s.event(5, "end", `{"exit_code":0,"exited":true,"status":"exit status 0"}`)
	})
	s, err := c.RunCommand(context.Background(), "s1", CommandRequest{Cmd: "echo hello"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, exit, ids, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if out != "hello" || exit == nil || exit.Code() != 0 || len(ids) != 5 || s.PID() != 12 || s.LastEventID() != 5 {
		t.Errorf("out %q exit %+v ids %v pid %d last %d", out, exit, ids, s.PID(), s.LastEventID())
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("after end: %v", err)
	}
}

// The daemon sends gap without an id, possibly mid-stream; it must not be
// taken for a replay of the previous event.
func TestGapWithoutID(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := startSSE(w)
		s.event(1, "start", `{"pid":12}`)
		s.raw("event: gap\ndata: {\"dropped\":100}\n\n")
		s.event(9, "end", `{"exit_code":0,"exited":true}`)
	})
	s, err := c.RunCommand(context.Background(), "s1", CommandRequest{Cmd: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, fmt.Sprintf("%s:%d", ev.Type, ev.ID))
	}
	if strings.Join(types, " ") != "start:1 gap:0 end:9" {
		t.Errorf("events %v", types)
	}
}

func TestServerErrorEvent(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := startSSE(w)
		s.event(1, "start", `{"pid":12}`)
		s.raw("event: error\ndata: {\"message\":\"agent gone\"}\n\n")
	})
	s, err := c.RunCommand(context.Background(), "s1", CommandRequest{Cmd: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, _, err = collect(s)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "daemon: agent gone") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunCommandBrokenStream(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := startSSE(w)
		s.event(1, "start", `{"pid":12}`)
		s.event(2, "stdout", `{"text":"x"}`)
	})
	s, err := c.RunCommand(context.Background(), "s1", CommandRequest{Cmd: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, _, err = collect(s)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want unexpected EOF", err)
	}
	if s.PID() != 12 || s.LastEventID() != 2 {
		t.Errorf("pid %d last %d", s.PID(), s.LastEventID())
	}
}

func TestCommandEventsSendsLastEventID(t *testing.T) {
	tests := []struct {
		after      uint64
		wantHeader string
	}{{0, ""}, {41, "41"}}
	for _, tt := range tests {
		t.Run(tt.wantHeader, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/sandboxes/s1/commands/7/events" || r.Header.Get("Last-Event-ID") != tt.wantHeader {
					t.Errorf("path %s Last-Event-ID %q", r.URL.Path, r.Header.Get("Last-Event-ID"))
				}
				s := startSSE(w)
				s.event(40, "stdout", `{"text":"old"}`) // a server replaying too much is filtered
				s.event(42, "gap", `{}`)
				s.event(43, "end", `{"exit_code":1,"exited":true}`)
			})
			s, err := c.CommandEvents(context.Background(), "s1", 7, tt.after)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, exit, ids, err := collect(s)
			if err != nil || exit.Code() != 1 {
				t.Fatalf("exit %+v err %v", exit, err)
			}
			want := "[40 42 43]"
			if tt.after > 0 {
				want = "[42 43]"
			}
			if fmt.Sprint(ids) != want {
				t.Errorf("ids = %v, want %s", ids, want)
			}
		})
	}
}

func TestRunCommandResumes(t *testing.T) {
	var mu sync.Mutex
	var resumedWith []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes/s1/commands":
			s := startSSE(w)
			s.event(1, "start", `{"pid":5}`)
			s.event(2, "stdout", `{"text":"a"}`)
			// connection drops here
		case r.URL.Path == "/v1/sandboxes/s1/commands/5/events":
			mu.Lock()
			resumedWith = append(resumedWith, r.Header.Get("Last-Event-ID"))
			n := len(resumedWith)
			mu.Unlock()
			if n == 1 {
				writeAPIError(w, http.StatusServiceUnavailable, "unavailable", "agent restarting")
				return
			}
			s := startSSE(w)
			s.event(2, "stdout", `{"text":"a"}`) // duplicate, skipped
			s.event(3, "stdout", `{"text":"b"}`)
			s.event(4, "end", `{"exit_code":-1,"exited":false,"status":"signal: killed"}`)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
		}
	})
	var attempts int
	s, err := c.RunCommandResumable(context.Background(), "s1", CommandRequest{Cmd: "x"}, ResumeOptions{
		Retries: 3, Backoff: time.Millisecond,
		OnResume: func(int, error) { attempts++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, exit, _, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if out != "ab" || exit.Code() != 137 || attempts != 2 {
		t.Errorf("out %q exit %+v attempts %d", out, exit, attempts)
	}
	if strings.Join(resumedWith, ",") != "2,2" {
		t.Errorf("Last-Event-IDs = %v", resumedWith)
	}
}

func TestResumeGivesUpOnNotFound(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			s := startSSE(w)
			s.event(1, "start", `{"pid":5}`)
			return
		}
		writeAPIError(w, http.StatusNotFound, "not_found", "no command 5")
	})
	s, err := c.RunCommandResumable(context.Background(), "s1", CommandRequest{Cmd: "x"}, ResumeOptions{Retries: 5, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, _, err = collect(s)
	if !IsNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
}

func TestRunCommandError(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "not_found", `sandbox "s1" not found`)
	})
	_, err := c.RunCommand(context.Background(), "s1", CommandRequest{Cmd: "x"})
	if !IsNotFound(err) || !strings.Contains(err.Error(), `sandbox "s1" not found`) {
		t.Fatalf("err = %v", err)
	}
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	release := make(chan struct{})
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := startSSE(w)
		s.event(1, "start", `{"pid":5}`)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s, err := c.RunCommandResumable(context.Background(), "s1", CommandRequest{Cmd: "x"}, ResumeOptions{Retries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(20 * time.Millisecond); s.Close() }()
	if _, err := s.Next(); err == nil {
		t.Fatal("Next after Close: want an error")
	}
}
