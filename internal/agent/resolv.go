package agent

import (
	"fmt"
	"net/netip"
	"os"
)

// resolvConf is where libc and most resolvers look.
const resolvConf = "/etc/resolv.conf"

// writeResolvConf points the sandbox's resolver at the egress gateway's
// DNS. Any address would be steered there; naming the gateway keeps it
// readable.
func writeResolvConf(server string) error {
	ip, err := netip.ParseAddr(server)
	if err != nil {
		return fmt.Errorf("nameserver %q: %w", server, err)
	}
	tmp := resolvConf + ".space"
	if err := os.WriteFile(tmp, []byte("nameserver "+ip.String()+"\noptions timeout:2 attempts:2\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, resolvConf); err != nil {
		return fmt.Errorf("install %s: %w", resolvConf, err)
	}
	return nil
}
