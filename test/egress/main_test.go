// Package egress tests the egress gateway end to end: a real spaced with
// real gVisor sandboxes (test/harness), and a stand-in internet the tests
// build themselves: a network namespace holding TEST-NET addresses
// (198.51.100.128/25) and a few addresses in ranges of the platform floor,
// with HTTP, HTTPS, TCP and UDP servers, and a DNS server on loopback
// that the gateway uses as its upstream. No packet leaves this machine.
package egress

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// sandboxCIDR is this package's range (10.243.0.0/16 is reserved for it).
const sandboxCIDR = "10.243.0.0/24"

var env struct {
	d   *harness.Daemon
	net *internet
}

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name:     "egress",
		Root:     "they run spaced, runsc, netns and nftables",
		Setup:    setup,
		Teardown: teardown,
	}))
}

// setup makes a private copy of the base template with the fresh agent,
// builds the stand-in internet and starts spaced with the test DNS server
// as its upstream and the stand-in's CA as the one it trusts.
func setup() error {
	bin, err := harness.Build()
	if err != nil {
		return err
	}
	templates, err := privateTemplates(filepath.Join(bin, "space-agent"))
	if err != nil {
		return err
	}
	if env.net, err = newInternet(); err != nil {
		return err
	}
	upstreamCA := filepath.Join(harness.Tmp(), "upstream-ca.pem")
	if err := os.WriteFile(upstreamCA, env.net.caPEM, 0o644); err != nil {
		return err
	}
	env.d, err = harness.Start(harness.Options{
		Name: "main", CIDR: sandboxCIDR, TemplatesDir: templates, NoPool: true,
		Env: []string{"SPACE_EGRESS_DNS=" + env.net.dnsAddr, "SPACE_EGRESS_UPSTREAM_CA=" + upstreamCA},
	})
	if err != nil && env.d != nil {
		return fmt.Errorf("%w\n%s", err, env.d.LogTail(60))
	}
	return err
}

// privateTemplates copies the base template into the suite's temp dir with
// agent installed, and returns the copy's templates dir: the shared one
// may hold another branch's agent by the time a sandbox boots.
func privateTemplates(agent string) (string, error) {
	dir := filepath.Join(harness.Tmp(), "templates")
	rootfs := filepath.Join(dir, "base", "rootfs-egress-a0") // a base image name: rootfs-<recipe>-a<agent>
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return "", err
	}
	src, err := filepath.EvalSymlinks(testenv.BaseRootfs())
	if err != nil {
		return "", err
	}
	for _, s := range [][]string{
		{"cp", "-a", "--reflink=auto", src + "/.", rootfs},
		{"install", "-m", "0755", agent, filepath.Join(rootfs, "usr/local/bin/space-agent")},
		{"ln", "-s", "rootfs-egress-a0", filepath.Join(dir, "base", "current")},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return dir, nil
}

// teardown shuts spaced down (killing its sandboxes and removing its
// firewall table) and removes the stand-in internet.
func teardown() error {
	if env.d != nil {
		env.d.Shutdown()
	}
	if env.net != nil {
		env.net.close()
	}
	return nil
}

// need skips t when the package cannot run; spaced's log's tail is
// printed if t fails.
func need(t *testing.T) {
	t.Helper()
	harness.Need(t)
	env.d.DumpOnFailure(t)
}
