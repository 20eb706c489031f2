package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// nextLimit bounds the first request after a pause, a resume, a fork or a
// kill. A hang detector, not a speed assertion: each of these takes
// milliseconds when it works (the resume itself is done before the
// request); what it hunts waited for minutes on a connection to the old
// instance. It leaves room for a loaded 2-core machine.
const nextLimit = 5 * time.Second

// first runs f with a context far longer than nextLimit (so a hang shows
// as a time, not as a deadline error) and fails t when f took longer than
// nextLimit. It returns f's error.
func first(t *testing.T, what string, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*nextLimit)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if took := time.Since(start); took > nextLimit {
		t.Errorf("%s took %s (err %v), more than %s", what, took.Round(time.Millisecond), err, nextLimit)
	}
	return err
}

// echo runs "echo word" and checks its output (echoAs, as a step).
func echo(c *client.Client, id, word string) func(context.Context) error {
	return func(ctx context.Context) error { return echoAs(ctx, c, id, word) }
}

// readFile reads path and checks it holds want.
func readFile(c *client.Client, id, path, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		r, err := c.Download(ctx, id, path)
		if err != nil {
			return err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err == nil && string(b) != want {
			err = errors.New(path + " holds " + string(b) + ", want " + want)
		}
		return err
	}
}

// openCommand starts a command that runs until stopped and reads its start,
// and returns a channel that gets the stream's end (its error) once it
// ends.
func openCommand(t *testing.T, c *client.Client, id string) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: "echo up; sleep 600"})
	if err != nil {
		t.Fatalf("open a stream in %s: %v", id, err)
	}
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("stream in %s before it printed: %v", id, err)
		}
		if ev.Type == client.EventStdout {
			break
		}
	}
	done := make(chan error, 1)
	go func() {
		defer s.Close()
		for {
			ev, err := s.Next()
			if err != nil || ev.Type == client.EventEnd {
				done <- err
				return
			}
		}
	}()
	return done
}

// ended fails t unless the stream of done ends within nextLimit of when.
func ended(t *testing.T, what string, done <-chan error, when time.Time) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(time.Until(when.Add(nextLimit))):
		t.Errorf("a command stream open at %s had not ended %s after it", what, nextLimit)
	}
}

// TestFirstRequestAfterLifecycle: through the native API, the first
// request after a pause, a resume, a fork and a kill is answered within a
// few seconds: by the new instance after a resume or a fork (a command and
// a file read), and with a clear refusal after a pause or a kill (404 that
// says "paused" or "killed"), never by waiting on a connection to an
// instance that is gone. A command stream open at a pause or a kill ends
// with it.
func TestFirstRequestAfterLifecycle(t *testing.T) {
	d := need(t)
	c := d.Client
	ctx := harness.Ctx(t, 5*time.Minute)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	killAtEnd(t, d, sb.ID)
	// Connections to the instance in use: spaced holds them.
	if _, err := c.Upload(ctx, sb.ID, "/home/user/f.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	if err := echo(c, sb.ID, "before")(ctx); err != nil {
		t.Fatal(err)
	}

	stream := openCommand(t, c, sb.ID)
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	ended(t, "a pause", stream, time.Now())
	for what, f := range map[string]func(context.Context) error{
		"command": echo(c, sb.ID, "paused"), "file read": readFile(c, sb.ID, "/home/user/f.txt", "kept"),
	} {
		// 404 today, as for any sandbox that is not running; the
		// message says why.
		if err := first(t, "the first "+what+" after a pause", f); !(client.IsNotFound(err) || client.IsFailedPrecondition(err)) || !strings.Contains(err.Error(), "is paused") {
			t.Errorf("the first %s after a pause: %v, want a 404 or 409 that says the sandbox is paused", what, err)
		}
	}

	if _, err := c.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := first(t, "the first file read after a resume", readFile(c, sb.ID, "/home/user/f.txt", "kept")); err != nil {
		t.Errorf("the first file read after a resume: %v", err)
	}
	if err := first(t, "the first command after a resume", echo(c, sb.ID, "resumed")); err != nil {
		t.Errorf("the first command after a resume: %v", err)
	}

	forks, err := c.ForkSandbox(ctx, sb.ID, 1)
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork: %v, %d forks", err, len(forks))
	}
	child := forks[0].ID
	killAtEnd(t, d, child)
	if err := first(t, "the parent's first command after a fork", echo(c, sb.ID, "parent")); err != nil {
		t.Errorf("the parent's first command after a fork: %v", err)
	}
	if err := first(t, "the fork's first file read", readFile(c, child, "/home/user/f.txt", "kept")); err != nil {
		t.Errorf("the fork's first file read: %v", err)
	}
	if err := first(t, "the fork's first command", echo(c, child, "child")); err != nil {
		t.Errorf("the fork's first command: %v", err)
	}

	stream = openCommand(t, c, sb.ID)
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("kill: %v", err)
	}
	ended(t, "a kill", stream, time.Now())
	for what, f := range map[string]func(context.Context) error{
		"command": echo(c, sb.ID, "killed"), "file read": readFile(c, sb.ID, "/home/user/f.txt", "kept"),
	} {
		if err := first(t, "the first "+what+" after a kill", f); !client.IsNotFound(err) || !strings.Contains(err.Error(), "is killed") {
			t.Errorf("the first %s after a kill: %v, want a 404 that says the sandbox is killed", what, err)
		}
	}
	// The fork lives on, on its own.
	if err := first(t, "the fork's first command after its parent's kill", echo(c, child, "orphan")); err != nil {
		t.Errorf("the fork after its parent's kill: %v", err)
	}
}
