package e2bcompat

import (
	"net/url"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/sandbox"
)

// The translation of E2B's snapshot API and pause modes onto the sandbox
// service (over the fake; test/e2b runs the real SDKs on real sandboxes).

func TestSnapshotsTranslation(t *testing.T) {
	h := newHarness(t)
	id := h.create(nil).SandboxID

	// Unnamed: a full snapshot (E2B's default), its ID spaced's.
	var unnamed snapshotInfoJSON
	resp := h.api("POST", "/sandboxes/"+id+"/snapshots", map[string]any{})
	if resp.StatusCode != 201 {
		t.Fatalf("create snapshot: %d %s", resp.StatusCode, readAll(resp))
	}
	decode(t, resp, &unnamed)
	if unnamed.SnapshotID == "" || len(unnamed.Names) != 0 || !h.fake.snaps[0].Memory {
		t.Fatalf("unnamed snapshot: %+v (memory %v)", unnamed, h.fake.snaps[0].Memory)
	}
	// Named, disk only: ID name:tag, names [name], in any case.
	var named snapshotInfoJSON
	resp = h.api("POST", "/sandboxes/"+id+"/snapshots", map[string]any{"name": "My-Snap", "memory": false})
	decode(t, resp, &named)
	if resp.StatusCode != 201 || named.SnapshotID != "my-snap:default" || len(named.Names) != 1 || named.Names[0] != "my-snap" || h.fake.snaps[1].Memory {
		t.Fatalf("named snapshot: %d %+v", resp.StatusCode, named)
	}
	// The same name and tag again replaces it.
	decode(t, h.api("POST", "/sandboxes/"+id+"/snapshots", map[string]any{"name": "my-snap"}), &named)
	decode(t, h.api("POST", "/sandboxes/"+id+"/snapshots", map[string]any{"name": "my-snap:v2"}), &named)
	if named.SnapshotID != "my-snap:v2" {
		t.Fatalf("tagged snapshot: %+v", named)
	}

	// (A template's name is refused with 409: test/e2b, with templates.)
	for _, body := range []string{`{"name":"ns/my-snap"}`, `{"name":"-bad"}`, `{"memory":"yes"}`, `{"name":`} {
		wantError(t, h.api("POST", "/sandboxes/"+id+"/snapshots", body), 400)
	}
	if n := len(h.fake.snaps); n != 3 {
		t.Fatalf("refused snapshots changed the list: %d snapshots, want 3", n)
	}
	wantError(t, h.api("POST", "/sandboxes/nosuch/snapshots", nil), 404)

	list := func(q string) []snapshotInfoJSON {
		t.Helper()
		resp := h.api("GET", "/snapshots?"+q, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("list %s: %d %s", q, resp.StatusCode, readAll(resp))
		}
		var out []snapshotInfoJSON
		decode(t, resp, &out)
		return out
	}
	if got := list(""); len(got) != 3 || got[0].SnapshotID != "my-snap:v2" || got[1].SnapshotID != "my-snap:default" || got[2].SnapshotID != unnamed.SnapshotID {
		t.Fatalf("list all: %+v", got)
	}
	if got := list("name=my-snap"); len(got) != 2 {
		t.Fatalf("list by name: %+v", got)
	}
	if got := list("name=my-snap:v2"); len(got) != 1 || got[0].SnapshotID != "my-snap:v2" {
		t.Fatalf("list by name:tag: %+v", got)
	}
	if got := list("name=" + unnamed.SnapshotID); len(got) != 1 {
		t.Fatalf("list by ID: %+v", got)
	}
	if got := list("name=nosuch"); len(got) != 0 {
		t.Fatalf("list by an unknown name: %+v", got)
	}
	other := h.create(nil).SandboxID
	if got := list("sandboxID=" + other); len(got) != 0 {
		t.Fatalf("list of a sandbox without snapshots: %+v", got)
	}
	// Paging.
	resp = h.api("GET", "/snapshots?limit=2", nil)
	var page []snapshotInfoJSON
	decode(t, resp, &page)
	next := resp.Header.Get("X-Next-Token")
	if len(page) != 2 || next == "" {
		t.Fatalf("page 1: %+v, next %q", page, next)
	}
	resp = h.api("GET", "/snapshots?limit=2&nextToken="+url.QueryEscape(next), nil)
	decode(t, resp, &page)
	if len(page) != 1 || page[0].SnapshotID != unnamed.SnapshotID || resp.Header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %+v, next %q", page, resp.Header.Get("X-Next-Token"))
	}
	wantError(t, h.api("GET", "/snapshots?limit=0", nil), 400)
	wantError(t, h.api("GET", "/snapshots?nextToken=%25", nil), 400)

	// A create names the snapshot as its template.
	for _, ref := range []string{unnamed.SnapshotID, "my-snap", "MY-SNAP:v2"} {
		sb := h.create(map[string]any{"templateID": ref, "metadata": map[string]string{"from": ref}})
		last := h.fake.creates[len(h.fake.creates)-1]
		if sb.SandboxID == "" || last.Snapshot == "" || last.Metadata["from"] != ref {
			t.Fatalf("create from %s: %+v, request %+v", ref, sb, last)
		}
	}
	wantError(t, h.api("POST", "/v2/sandboxes", map[string]any{"templateID": "my-snap:nosuch"}), 404)

	// delete_snapshot: DELETE /templates/{id}; then 404 (the SDKs: False).
	for _, ref := range []string{unnamed.SnapshotID, "my-snap"} {
		if resp := h.api("DELETE", "/templates/"+ref, nil); resp.StatusCode != 204 {
			t.Fatalf("delete %s: %d %s", ref, resp.StatusCode, readAll(resp))
		}
		wantError(t, h.api("DELETE", "/templates/"+ref, nil), 404)
	}
	if got := list(""); len(got) != 0 {
		t.Fatalf("after deleting every snapshot: %+v", got)
	}
}

func TestPauseModes(t *testing.T) {
	h := newHarness(t)
	id := h.create(nil).SandboxID
	if resp := h.api("POST", "/sandboxes/"+id+"/pause", map[string]any{"memory": false}); resp.StatusCode != 204 {
		t.Fatalf("pause without memory: %d %s", resp.StatusCode, readAll(resp))
	}
	if got := h.fake.pauses[0]; !got.DiskOnly || !got.RequireHealthyAgent {
		t.Fatalf("pause memory:false asked the service for %+v", got)
	}
	var detail sandboxDetailJSON
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &detail)
	if detail.State != "paused" || detail.PauseMode != "filesystem" {
		t.Fatalf("detail after a filesystem pause: state %q pauseMode %q", detail.State, detail.PauseMode)
	}
	// on_resume="reboot" of a filesystem pause is what a resume does.
	if resp := h.api("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{"memory": false}); resp.StatusCode != 201 {
		t.Fatalf("connect memory:false to a filesystem pause: %d %s", resp.StatusCode, readAll(resp))
	}

	if resp := h.api("POST", "/sandboxes/"+id+"/pause", map[string]any{"requireHealthyGuest": true}); resp.StatusCode != 204 {
		t.Fatalf("strict pause: %d", resp.StatusCode)
	}
	if got := h.fake.pauses[1]; got.DiskOnly || !got.RequireHealthyAgent {
		t.Fatalf("strict pause asked for %+v", got)
	}
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &detail)
	if detail.PauseMode != "full" {
		t.Fatalf("pauseMode after a full pause: %q", detail.PauseMode)
	}
	// A full pause has no disk apart from its memory image: no reboot.
	e := wantError(t, h.api("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{"memory": false}), 409)
	if !strings.Contains(e.Message, "memory") {
		t.Errorf("reboot refusal does not say why: %q", e.Message)
	}
	if resp := h.api("POST", "/v2/sandboxes/"+id+"/connect", nil); resp.StatusCode != 201 {
		t.Fatalf("connect after the refused reboot: %d", resp.StatusCode)
	}
	detail = sandboxDetailJSON{}
	decode(t, h.api("GET", "/sandboxes/"+id, nil), &detail)
	if detail.PauseMode != "" {
		t.Fatalf("pauseMode of a running sandbox: %q", detail.PauseMode)
	}

	// lifecycle on_timeout {action: pause, mode: filesystem}.
	h.create(map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false})
	h.create(map[string]any{"templateID": "base", "autoPause": false, "autoPauseMemory": false})
	n := len(h.fake.creates)
	if got := []sandbox.CreateRequest{h.fake.creates[n-2], h.fake.creates[n-1]}; !got[0].AutoPause || !got[0].AutoPauseDiskOnly || got[1].AutoPauseDiskOnly {
		t.Fatalf("lifecycle translation: %+v", got)
	}
}
