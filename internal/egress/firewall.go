package egress

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"

	"github.com/google/nftables"
)

// TableName is the nftables table of the daemon whose sandboxes live in
// cidr. Several daemons share a host, each with its own range, so each
// has its own table and touches no other.
func TableName(cidr netip.Prefix) string {
	r := strings.NewReplacer(".", "_", "/", "_")
	return "space_egress_" + r.Replace(cidr.Masked().String())
}

// ruleset steers every sandbox packet to the gateway and drops the rest:
// DNS over UDP and TCP goes to the DNS listener; TCP (any address, any
// port) from a sandbox in the egress set (one whose policy allows
// anything) to the TCP listener; the input hook then accepts only those
// redirected flows and the replies to connections spaced opened (its
// agent and proxy dials), so a sandbox with no egress has its packets
// dropped before any socket sees them; nothing from or to a sandbox is
// forwarded. The host-side veth names start with ifPrefix; the source
// range keys the rules to this daemon.
func ruleset(table, ifPrefix string, cidr netip.Prefix, tcpPort, dnsPort int) string {
	src := fmt.Sprintf(`iifname "%s*" ip saddr %s`, ifPrefix, cidr.Masked())
	return fmt.Sprintf(`
table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	set egress {
		type ipv4_addr
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		%[2]s udp dport 53 redirect to :%[5]d
		%[2]s tcp dport 53 redirect to :%[5]d
		%[2]s ip saddr @egress meta l4proto tcp redirect to :%[4]d
	}
	chain input {
		type filter hook input priority -10; policy accept;
		%[2]s ct state established,related accept
		%[2]s ct status dnat tcp dport %[4]d accept
		%[2]s ct status dnat tcp dport %[5]d accept
		%[2]s ct status dnat udp dport %[5]d accept
		%[2]s counter drop
		iifname "%[3]s*" meta nfproto ipv6 counter drop
	}
	chain forward {
		type filter hook forward priority -10; policy accept;
		%[2]s counter drop
		oifname "%[3]s*" ip daddr %[6]s counter drop
		iifname "%[3]s*" meta nfproto ipv6 counter drop
	}
}
`, table, src, ifPrefix, tcpPort, dnsPort, cidr.Masked())
}

// writeEgressSet changes the egress set in one netlink batch, all or
// nothing: flush empties it first, then add goes in and del goes out.
// Netlink, not nft, because this runs on every sandbox create and kill,
// and an nft process costs ~16 ms.
func writeEgressSet(table string, flush bool, add, del []netip.Addr) error {
	set := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: table}, Name: "egress"}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if flush {
		c.FlushSet(set)
	}
	if len(add) > 0 {
		if err := c.SetAddElements(set, setElements(add)); err != nil {
			return fmt.Errorf("add to set inet %s egress: %w", table, err)
		}
	}
	if len(del) > 0 {
		if err := c.SetDeleteElements(set, setElements(del)); err != nil {
			return fmt.Errorf("delete from set inet %s egress: %w", table, err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("write set inet %s egress (+%d -%d, flush %t): %w", table, len(add), len(del), flush, err)
	}
	return nil
}

func setElements(addrs []netip.Addr) []nftables.SetElement {
	e := make([]nftables.SetElement, len(addrs))
	for i, a := range addrs {
		e[i] = nftables.SetElement{Key: a.AsSlice()}
	}
	return e
}

// setDiff is what turns the set have into want. A nil have is a set
// whose contents are unknown: everything in want is added.
func setDiff(have, want map[netip.Addr]bool) (add, del []netip.Addr) {
	for a := range want {
		if !have[a] {
			add = append(add, a)
		}
	}
	for a := range have {
		if !want[a] {
			del = append(del, a)
		}
	}
	slices.SortFunc(add, netip.Addr.Compare)
	slices.SortFunc(del, netip.Addr.Compare)
	return add, del
}

// installRules replaces the daemon's table in one transaction, so a
// restarted daemon never leaves its sandboxes unfiltered.
func installRules(rules string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = bytes.NewBufferString(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install nftables rules: %w: %s", err, out)
	}
	return nil
}

// RemoveRules deletes the daemon's table. spaced keeps it across a
// restart (its sandboxes keep running); tests and uninstall remove it.
func RemoveRules(cidr netip.Prefix) error {
	out, err := exec.Command("nft", "delete", "table", "inet", TableName(cidr)).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("No such file")) {
		return fmt.Errorf("delete nftables table: %w: %s", err, out)
	}
	return nil
}
