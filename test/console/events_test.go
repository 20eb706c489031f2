package console

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// sseEvent is one server-sent event.
type sseEvent struct{ id, event, data string }

// openEvents opens GET /v1/events (after lastID, when set) and returns its
// events as they come.
func openEvents(t *testing.T, ctx context.Context, addr, key, lastID string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /v1/events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return out
}

// next returns the next event that match accepts, failing t after 20 s.
func next(t *testing.T, events <-chan sseEvent, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s within 20 s", what)
		}
	}
}

func idOf(t *testing.T, ev sseEvent) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(ev.id, 10, 64)
	if err != nil {
		t.Fatalf("event id %q: %v", ev.id, err)
	}
	return n
}

func sandboxEvent(id, state string) func(sseEvent) bool {
	return func(ev sseEvent) bool {
		var sb struct{ ID, State string }
		json.Unmarshal([]byte(ev.data), &sb)
		return ev.event == "sandbox" && sb.ID == id && sb.State == state
	}
}

// TestEventsStream checks the feed the live list stands on, as any client
// of GET /v1/events sees it: reset first, a sandbox's changes with ids that
// only go up, what was missed replayed after Last-Event-ID, and a reset for
// an id the server never gave.
func TestEventsStream(t *testing.T) {
	d := need(t)
	killAtEnd(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := openEvents(t, ctx, d.Addr, d.APIKey, "")
	first := next(t, events, "the first event", func(sseEvent) bool { return true })
	if first.event != "reset" || first.id == "" {
		t.Fatalf("first event %+v, want reset with an id", first)
	}

	sb, err := d.Client.CreateSandbox(context.Background(), client.CreateSandboxRequest{Metadata: map[string]string{"owner": "events"}})
	if err != nil {
		t.Fatal(err)
	}
	running := next(t, events, "the new sandbox running", sandboxEvent(sb.ID, "running"))
	if a, b := idOf(t, first), idOf(t, running); b <= a {
		t.Errorf("event id %s does not come after %s", running.id, first.id)
	}
	if strings.Contains(running.data, sb.AccessToken) {
		t.Errorf("the event carries the sandbox's access token")
	}
	cancel()

	// Missed while away: a kill, replayed after the last id we had.
	if err := d.Client.KillSandbox(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	again := openEvents(t, ctx2, d.Addr, d.APIKey, running.id)
	got := next(t, again, "the missed kill", func(ev sseEvent) bool { return ev.event == "reset" || sandboxEvent(sb.ID, "killed")(ev) })
	if got.event == "reset" {
		t.Fatalf("a resume with a recent Last-Event-ID got a reset")
	}
	cancel2()

	// An id this spaced never gave (as after a restart): reset.
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	bogus := openEvents(t, ctx3, d.Addr, d.APIKey, "1")
	if ev := next(t, bogus, "a reset", func(sseEvent) bool { return true }); ev.event != "reset" {
		t.Fatalf("after an unknown Last-Event-ID the first event is %+v, want reset", ev)
	}
}
