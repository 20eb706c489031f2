package users

import (
	"net/http"
	"testing"
)

func TestExpandPath(t *testing.T) {
	u := &User{Home: "/home/user"}
	tests := []struct{ in, want string }{
		{"~", "/home/user"},
		{"~/a/b", "/home/user/a/b"},
		{"rel/x", "/home/user/rel/x"},
		{"", "/home/user"},
		{"/abs/../abs/y", "/abs/y"},
	}
	for _, tt := range tests {
		if got := ExpandPath(tt.in, u); got != tt.want {
			t.Errorf("ExpandPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name, explicit, auth, def, want string
		wantErr                         bool
	}{
		{name: "explicit wins", explicit: "root", auth: "Basic bm9ib2R5Og==", def: "nobody", want: "root"},
		{name: "basic auth", auth: "Basic bm9ib2R5Og==", def: "root", want: "nobody"},
		{name: "default", def: "root", want: "root"},
		{name: "bad basic falls back", auth: "Basic !!!", def: "root", want: "root"},
		{name: "unknown", def: "no-such-user-xyz", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.auth != "" {
				h.Set("Authorization", tt.auth)
			}
			u, err := Resolve(tt.explicit, h, Defaults{User: tt.def})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && u.Name != tt.want {
				t.Fatalf("user %q, want %q", u.Name, tt.want)
			}
		})
	}
}

// Cached lookups answer like the first one, and callers own what they get.
func TestLookupCached(t *testing.T) {
	first, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	first.Groups = append(first.Groups[:0], 4242)
	second, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if second.UID != 0 || second.Home == "" || len(second.Groups) == 0 || second.Groups[0] == 4242 {
		t.Fatalf("second lookup of root: %+v (a caller's change leaked into the cache?)", second)
	}
	if _, err := Lookup("no-such-user-here"); err == nil {
		t.Fatal("lookup of a missing user succeeded")
	}
}
