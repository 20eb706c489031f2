package egress

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/spacesandbox/space/internal/testenv"
)

// kernelGateway is a gateway with only what Refresh needs, writing to a
// throwaway table that holds just the egress set; the table is deleted
// when tb ends.
func kernelGateway(tb testing.TB, table string, addrs *[]netip.Addr) *Gateway {
	tb.Helper()
	testenv.NeedRoot(tb, "writes an nftables table")
	testenv.NeedCommand(tb, "nft")
	if err := installRules(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\ntable inet %[1]s { set egress { type ipv4_addr; }; }\n", table)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if out, err := exec.Command("nft", "delete", "table", "inet", table).CombinedOutput(); err != nil {
			tb.Errorf("delete table %s: %v: %s", table, err, out)
		}
	})
	return &Gateway{log: slog.New(slog.DiscardHandler), table: table, cfg: Config{EgressAddrs: func() []netip.Addr { return slices.Clone(*addrs) }}}
}

func kernelSet(t *testing.T, table string) []netip.Addr {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.GetSetByName(&nftables.Table{Family: nftables.TableFamilyINet, Name: table}, "egress")
	if err != nil {
		t.Fatal(err)
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, e := range elems {
		a, _ := netip.AddrFromSlice(e.Key)
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TestRefreshKernel checks the kernel's set follows Refresh, also after an
// update failed: because the set lost an element behind the gateway's back
// (the set is replaced whole at once), or because the table was gone (the
// next Refresh replaces the set whole, even with no change of addresses).
func TestRefreshKernel(t *testing.T) {
	const table = "space_egress_unittest"
	var addrs []netip.Addr
	g := kernelGateway(t, table, &addrs)
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	// Left over from an earlier daemon: the first Refresh flushes it.
	if err := installRules("add element inet " + table + " egress { 10.9.9.9 }\n"); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		behind string // nft script run before the Refresh
		addrs  []netip.Addr
		gone   bool // the table is gone: nothing to check
	}{
		{addrs: nil},
		{addrs: []netip.Addr{a("10.0.0.2")}},
		{addrs: []netip.Addr{a("10.0.0.2"), a("10.0.0.6")}},
		{addrs: []netip.Addr{a("10.0.0.6")}},
		{behind: "delete element inet " + table + " egress { 10.0.0.6 }", addrs: []netip.Addr{a("10.0.0.10")}},
		{behind: "delete table inet " + table, addrs: []netip.Addr{a("10.0.0.10"), a("10.0.0.14")}, gone: true},
		{behind: "table inet " + table + " { set egress { type ipv4_addr; }; }", addrs: []netip.Addr{a("10.0.0.10"), a("10.0.0.14")}},
		{addrs: nil},
	} {
		if step.behind != "" {
			if err := installRules(step.behind + "\n"); err != nil {
				t.Fatal(err)
			}
		}
		addrs = step.addrs
		g.Refresh()
		if step.gone {
			continue
		}
		if got := kernelSet(t, table); !slices.Equal(got, step.addrs) {
			t.Errorf("step %d: kernel set %v, want %v", i, got, step.addrs)
		}
	}
}

// BenchmarkRefreshAddOne times a Refresh that adds one address to the
// set, as a sandbox with egress being created does. -benchtime=200x
// gives the median over 200 runs.
func BenchmarkRefreshAddOne(b *testing.B) {
	var addrs []netip.Addr
	g := kernelGateway(b, "space_egress_bench", &addrs)
	g.Refresh()
	took := make([]time.Duration, 0, b.N)
	next := netip.MustParseAddr("10.0.0.1")
	for b.Loop() {
		addrs = append(addrs, next)
		next = next.Next()
		start := time.Now()
		g.Refresh()
		took = append(took, time.Since(start))
	}
	if len(g.inSet) != len(addrs) {
		b.Fatalf("set holds %d addresses, want %d", len(g.inSet), len(addrs))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "µs-median")
}
