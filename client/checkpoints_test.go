package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
)

func TestPauseAndSnapshotBodies(t *testing.T) {
	var got []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(b))
		switch r.URL.Path {
		case "/v1/sandboxes/sb1/pause":
			fmt.Fprint(w, `{"id":"sb1","state":"paused","checkpoint":{"id":"c1","memory":false}}`)
		case "/v1/snapshots":
			fmt.Fprint(w, `{"snapshots":[{"id":"s1","memory":true,"name":"app","tag":"v1"}]}`)
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":"s1","sandbox_id":"sb1","memory":true,"name":"app","tag":"v1"}`)
		}
	})
	ctx := context.Background()
	sb, err := c.PauseSandboxWith(ctx, "sb1", PauseOptions{DiskOnly: true})
	if err != nil || sb.Checkpoint == nil || sb.Checkpoint.Memory {
		t.Fatalf("disk-only pause: %+v, %v", sb, err)
	}
	if _, err := c.PauseSandbox(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	sn, err := c.TakeSnapshotWith(ctx, "sb1", SnapshotOptions{Memory: true, Name: "app:v1"})
	if err != nil || !sn.Memory || sn.Name != "app" || sn.Tag != "v1" {
		t.Fatalf("full snapshot: %+v, %v", sn, err)
	}
	if _, err := c.TakeSnapshot(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListSnapshotsNamed(ctx, "sb1", "app"); err != nil || len(l) != 1 || !l[0].Memory {
		t.Fatalf("list: %+v, %v", l, err)
	}
	want := []string{
		`POST /v1/sandboxes/sb1/pause? {"keep_memory":false}`,
		`POST /v1/sandboxes/sb1/pause? `,
		`POST /v1/sandboxes/sb1/snapshots? {"memory":true,"name":"app:v1"}`,
		`POST /v1/sandboxes/sb1/snapshots? {}`,
		`GET /v1/snapshots?name=app&sandbox_id=sb1 `,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}
