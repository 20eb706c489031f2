package sandbox

import (
	"reflect"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// The API answers a sandbox's state as the domain spells it: a catalog
// that spelled a state otherwise would change the wire format.
func TestStatesAreSpelledAsStored(t *testing.T) {
	for _, tc := range []struct {
		domain State
		stored string
	}{
		{StateCreating, store.StateCreating},
		{StateRunning, store.StateRunning},
		{StatePaused, store.StatePaused},
		{StateResuming, store.StateResuming},
		{StateKilled, store.StateKilled},
		{StateLost, store.StateLost},
	} {
		if got := stateOf(tc.stored); got != tc.domain {
			t.Errorf("stateOf(%q) = %q, want %q", tc.stored, got, tc.domain)
		}
		if q := (ListFilter{States: []State{tc.domain}}).query(0); len(q.States) != 1 || q.States[0] != tc.stored {
			t.Errorf("the query for %q selects %q, want %q", tc.domain, q.States, tc.stored)
		}
	}
}

func TestFromRecordKeepsTheCheckpoint(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		stored *store.CheckpointRef
		want   *CheckpointInfo
	}{
		{"none", nil, nil},
		{"memory", &store.CheckpointRef{ID: "c", CreatedAt: at, Bytes: 7, Took: time.Second}, &CheckpointInfo{ID: "c", CreatedAt: at, Bytes: 7, Took: time.Second}},
		{"disk only", &store.CheckpointRef{ID: "d", DiskOnly: true}, &CheckpointInfo{ID: "d", DiskOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromRecord(&store.Sandbox{ID: "s", State: store.StatePaused, Checkpoint: tc.stored}).Checkpoint
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("checkpoint = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// fullNetworkRow sets every field of a stored policy (allNonZero checks
// that it does, so a field added to the store fails the tests below until
// NetworkOf and NetworkRow map it).
func fullNetworkRow() *store.NetworkPolicy {
	yes, no := true, false
	return &store.NetworkPolicy{
		AllowInternet: &no, AllowOut: []string{"a.example:443", "*.b.example"}, DenyOut: []string{"203.0.113.0/24"},
		AllowPublicTraffic: &yes, AllowFirst: true,
		Headers: map[string]map[string]string{"api.example": {"X-Api-Key": "v"}},
		Extra:   []byte(`{"rules":{}}`),
	}
}

// allNonZero fails for every zero field of the struct v points to.
func allNonZero(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Errorf("%s.%s is not set in the test's fixture", rv.Type().Name(), rv.Type().Field(i).Name)
		}
	}
}

// sameFields fails unless the domain and stored structs have the same
// field names (what the mappings copy one to one).
func sameFields(t *testing.T, domain, stored any) {
	t.Helper()
	names := func(v any) []string {
		rt := reflect.TypeOf(v).Elem()
		var out []string
		for i := range rt.NumField() {
			out = append(out, rt.Field(i).Name)
		}
		return out
	}
	if d, s := names(domain), names(stored); !reflect.DeepEqual(d, s) {
		t.Errorf("fields %v, stored %v", d, s)
	}
}

func TestNetworkPolicyRoundTrips(t *testing.T) {
	row := fullNetworkRow()
	allNonZero(t, row)
	sameFields(t, &NetworkPolicy{}, row)
	got := NetworkOf(row)
	allNonZero(t, got)
	if back := NetworkRow(got); !reflect.DeepEqual(back, row) {
		t.Errorf("stored -> domain -> stored = %+v, want %+v", back, row)
	}
	if again := NetworkOf(NetworkRow(got)); !reflect.DeepEqual(again, got) {
		t.Errorf("domain -> stored -> domain = %+v, want %+v", again, got)
	}
	if c := cloneNetworkRow(row); !reflect.DeepEqual(c, row) {
		t.Errorf("clone = %+v, want %+v", c, row)
	}
	if NetworkOf(nil) != nil || NetworkRow(nil) != nil {
		t.Error("a nil policy maps to a non-nil one")
	}
	// The copies share nothing with the row: the egress gateway and API
	// callers hold them while the record changes.
	*got.AllowInternet, *got.AllowPublicTraffic = true, false
	got.AllowOut[0], got.DenyOut[0], got.Extra[0] = "x", "x", 'x'
	got.Headers["api.example"]["X-Api-Key"] = "x"
	if !reflect.DeepEqual(row, fullNetworkRow()) {
		t.Errorf("changing the mapped policy changed the row: %+v", row)
	}
}

func TestVolumeMountsRoundTrip(t *testing.T) {
	rows := []store.VolumeMount{{VolumeID: "vol-1", Name: "data", Path: "/data", ReadOnly: true}}
	allNonZero(t, &rows[0])
	sameFields(t, &VolumeMount{}, &rows[0])
	got := mountsOf(rows)
	allNonZero(t, &got[0])
	if back := mountRows(got); !reflect.DeepEqual(back, rows) {
		t.Errorf("stored -> domain -> stored = %+v, want %+v", back, rows)
	}
	if mountsOf(nil) != nil || mountRows(nil) != nil {
		t.Error("no mounts map to some")
	}
}
