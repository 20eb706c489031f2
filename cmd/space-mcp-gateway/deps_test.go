package main

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed are the only non-standard packages the gateway may link: it runs
// in every mcp-gateway sandbox, so it is the official Go MCP SDK and what
// that needs, and never the control plane.
var allowed = []string{
	"github.com/modelcontextprotocol/go-sdk/",
	"github.com/google/jsonschema-go/",
	"github.com/segmentio/asm/",
	"github.com/segmentio/encoding/",
	"github.com/yosida95/uritemplate/",
	"golang.org/x/oauth2",
	"golang.org/x/sync/",
	"golang.org/x/sys/",
	"golang.org/x/time/",
	"github.com/spacesandbox/space/internal/mcpgateway",
	"github.com/spacesandbox/space/cmd/space-mcp-gateway",
}

func TestDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		ok := false
		for _, a := range allowed {
			a = strings.TrimSuffix(a, "/")
			ok = ok || pkg == a || strings.HasPrefix(pkg, a+"/")
		}
		if !ok {
			t.Errorf("space-mcp-gateway depends on %s, which is not allowed", pkg)
		}
	}
}
