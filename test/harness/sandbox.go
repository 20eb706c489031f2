package harness

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// Ctx is a context that ends after d or with t, whichever comes first.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitFor polls cond until it is true or the timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NewSandbox creates a sandbox and kills it when t ends. A failed kill is
// an error unless the sandbox is gone already or spaced is not healthy
// (a test that killed spaced or wore it out says so itself).
func (d *Daemon) NewSandbox(t testing.TB, req client.CreateSandboxRequest) *client.Sandbox {
	t.Helper()
	sb, err := d.Client.CreateSandbox(Ctx(t, 60*time.Second), req)
	if err != nil {
		t.Fatalf("create sandbox %+v: %v", req, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Client.KillSandbox(ctx, sb.ID); err != nil && !client.IsNotFound(err) && d.HealthyWithin(5*time.Second) == nil {
			t.Errorf("cleanup: kill %s: %v", sb.ID, err)
		}
	})
	return sb
}

// Result is how a command ended and what it wrote.
type Result struct {
	Stdout, Stderr string
	Exit           *client.ExitInfo
}

// Exec runs a command in sandbox id through the client and collects its
// output; an error is a broken stream, not a non-zero exit.
func (d *Daemon) Exec(ctx context.Context, id string, req client.CommandRequest) (Result, error) {
	s, err := d.Client.RunCommand(ctx, id, req)
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	return Collect(s)
}

// Collect reads a command's stream to its end; an error is a broken
// stream, not a non-zero exit.
func Collect(s *client.CommandStream) (Result, error) {
	var r Result
	var out, errb bytes.Buffer
	for {
		ev, err := s.Next()
		if err != nil {
			r.Stdout, r.Stderr = out.String(), errb.String()
			return r, fmt.Errorf("%w (stdout %q, stderr %q)", err, Clip(r.Stdout), Clip(r.Stderr))
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventStderr:
			errb.Write(ev.Data)
		case client.EventEnd:
			r.Stdout, r.Stderr, r.Exit = out.String(), errb.String(), ev.Exit
			return r, nil
		}
	}
}

// Clip shortens s to its first and last 1000 bytes, for messages.
func Clip(s string) string {
	if len(s) > 2000 {
		return s[:1000] + "\n...\n" + s[len(s)-1000:]
	}
	return s
}

// WaitRest waits up to timeout until the API says sandbox id rests in tier
// (client.RestFrozen, client.RestHibernated) and shows it running, and
// fails the test otherwise; it returns the sandbox as last read.
func (d *Daemon) WaitRest(t testing.TB, id, tier string, timeout time.Duration) *client.Sandbox {
	t.Helper()
	var got *client.Sandbox
	var err error
	if !WaitFor(timeout, func() bool {
		got, err = d.Client.GetSandboxRest(Ctx(t, 10*time.Second), id)
		return err == nil && string(got.Rest) == tier
	}) {
		t.Fatalf("sandbox %s never rested %s: %+v, %v", id, tier, got, err)
	}
	if got.State != client.StateRunning {
		t.Errorf("a sandbox resting %s shows as %q, want running", tier, got.State)
	}
	return got
}
