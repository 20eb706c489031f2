package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestAddressRangeInUse: when a sandbox's /30 already has an address on the
// host (a leftover, another daemon on the same range), spaced must not
// share it — it would be talking to somebody else's sandbox — but skip it.
func TestAddressRangeInUse(t *testing.T) {
	need(t)
	const link = "vsee2eoverlap"
	exec.Command("ip", "link", "del", link).Run()
	hostCmd(t, "ip", "link", "add", link, "type", "veth", "peer", "name", "vsqe2eoverlap")
	t.Cleanup(func() { exec.Command("ip", "link", "del", link).Run() })
	hostCmd(t, "ip", "addr", "add", "10.241.128.1/30", "dev", link) // slot 0 of the daemon below

	d := ownDaemon(t, harness.Options{Name: "overlap", CIDR: "10.241.128.0/20", NoPool: true})
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	if out := sh(t, d, sb.ID, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("sandbox on the next slot does not work: %q", out)
	}
	host, _ := sandboxAddrs(t, sb.ID)
	if host == "10.241.128.1" {
		t.Fatal("sandbox got the range that is in use on the host")
	}
	// The slot stays quarantined for a while: a second create skips it too.
	sb2 := d.NewSandbox(t, client.CreateSandboxRequest{})
	if host2, _ := sandboxAddrs(t, sb2.ID); host2 == "10.241.128.1" {
		t.Fatal("second sandbox got the range that is in use on the host")
	}
}
