package e2b_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// mcpCIDR is the sandbox range of the MCP gateway test's spaced.
const mcpCIDR = "10.242.52.0/22"

// TestMCPGateway runs E2B's MCP gateway (`mcp=` at create) through the
// unmodified SDKs, Python (mcp/test_mcp_gateway.py) and JS
// (js/mcp-gateway.mjs), with the official MCP clients of each language
// reaching the gateway from the host through spaced's port routing. The
// mcp-gateway template is built first on its own spaced, the way a user
// builds it (scripts/build-mcp-gateway.sh: the MCP servers from PyPI and
// npm are fetched on the host, the build needs no network).
func TestMCPGateway(t *testing.T) {
	testenv.NeedCommand(t, "python3", "node", "npm")
	d := harness.Own(t, harness.Options{Name: "mcp", CIDR: mcpCIDR, NoPool: true})
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	harness.InstallSDKs(t, here)
	root := filepath.Join(here, "..", "..")
	start := time.Now()
	build := exec.Command("scripts/build-mcp-gateway.sh")
	build.Dir = root
	build.Env = append(harness.WithoutE2B(os.Environ()), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey, "SPACE_CLI="+harness.Bin(t, "space"))
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/build-mcp-gateway.sh: %v\n%s", err, out)
	}
	t.Logf("mcp-gateway built in %s", time.Since(start).Round(time.Millisecond))

	env := append(harness.WithoutE2B(os.Environ()), "E2B_API_URL=http://"+d.Addr, "E2B_SANDBOX_URL=http://"+d.Addr, "E2B_API_KEY="+d.APIKey)
	t.Run("python", func(t *testing.T) {
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "mcp"), env, suiteTimeout, filepath.Join(here, ".venv", "bin", "python"),
			"-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mcp_gateway.py")
	})
	t.Run("js", func(t *testing.T) {
		harness.SDKSuite(t, d.Tail, filepath.Join(here, "js"), env, suiteTimeout, "node", "--test", "--test-force-exit", filepath.Join(here, "js", "mcp-gateway.mjs"))
	})
}
