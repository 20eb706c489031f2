package network

import (
	"bytes"
	"fmt"
	"os/exec"
)

// firewallRules is the host's whole policy for sandboxes, one nftables table
// matched by the host veth name prefix, so no rule changes per sandbox.
// A sandbox may answer connections the host opened (spaced dialling its
// agent) and nothing else: no packet from a sandbox reaches a host socket,
// and nothing is forwarded to or from a sandbox interface.
const firewallRules = `
table inet space
delete table inet space
table inet space {
	chain input {
		type filter hook input priority -10; policy accept;
		iifname "` + hostIfPrefix + `*" ct state established,related accept
		iifname "` + hostIfPrefix + `*" counter drop
	}
	chain forward {
		type filter hook forward priority -10; policy accept;
		iifname "` + hostIfPrefix + `*" counter drop
		oifname "` + hostIfPrefix + `*" counter drop
	}
}
`

// InstallFirewall (re)installs the sandbox firewall. It is idempotent and
// runs once when spaced starts, before any sandbox is attached.
func InstallFirewall() error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = bytes.NewBufferString(firewallRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install nftables rules: %w: %s", err, out)
	}
	return nil
}
