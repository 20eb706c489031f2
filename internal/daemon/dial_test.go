package daemon

import (
	"context"
	"net/netip"
	"slices"
	"testing"
)

// TestNodeHostAddrs: a cluster node's URL gives the addresses the tenant
// dialer refuses, from an IP literal or a name.
func TestNodeHostAddrs(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"http://192.0.2.7:8080", "192.0.2.7"},
		{"https://[2001:db8::7]:8443/", "2001:db8::7"},
		// From /etc/hosts: no question leaves the machine.
		{"http://localhost:8080", "127.0.0.1"},
	} {
		got, err := hostAddrs(context.Background(), tc.url)
		if err != nil || !slices.Contains(got, netip.MustParseAddr(tc.want)) {
			t.Errorf("%s: %v %v, want %s among them", tc.url, got, err, tc.want)
		}
	}
}
