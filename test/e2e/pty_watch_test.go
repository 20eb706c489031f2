package e2e

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestPTY drives an interactive shell over the WebSocket terminal: typed
// input reaches it, a resize is seen by the terminal, and the exit code
// comes back.
func TestPTY(t *testing.T) {
	d := need(t)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	ctx := harness.Ctx(t, time.Minute)
	p, err := d.Client.OpenPTY(ctx, sb.ID, client.PTYOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(p)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(want string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q", want)
				}
				if strings.Contains(l, want) && !strings.Contains(l, "echo") {
					return
				}
			case <-deadline:
				t.Fatalf("no %q from the terminal", want)
			}
		}
	}
	if _, err := p.Write([]byte("echo tty-$((6*7)); stty size | sed 's/^/size-/'\n")); err != nil {
		t.Fatal(err)
	}
	waitLine("tty-42")
	waitLine("size-30 100")
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	p.Write([]byte("stty size | sed 's/^/size-/'; whoami | sed 's/^/who-/'\n"))
	waitLine("size-40 120")
	waitLine("who-user")
	p.Write([]byte("exit 3\n"))
	code, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
}

// TestWatch: a recursive watch reports creates and writes under the
// watched directory, named relative to it.
func TestWatch(t *testing.T) {
	d := need(t)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	sh(t, d, sb.ID, "mkdir -p /home/user/w/sub")
	ctx := harness.Ctx(t, time.Minute)
	w, err := d.Client.Watch(ctx, sb.ID, "/home/user/w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sh(t, d, sb.ID, "echo 1 > /home/user/w/a.txt; echo 2 > /home/user/w/sub/b.txt")
	seen := map[string]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && !(seen["a.txt"] && seen["sub/b.txt"]) {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("watch: %v (seen %v)", err, seen)
		}
		seen[ev.Name] = true
	}
	if !seen["a.txt"] || !seen["sub/b.txt"] {
		t.Fatalf("events seen: %v, want a.txt and sub/b.txt", seen)
	}
}
