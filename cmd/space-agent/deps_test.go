package main

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed are the only non-standard packages the agent may link (tailscale's
// tstest/deptest is the model): it must stay small and never import the
// control plane.
var allowed = []string{
	"connectrpc.com/connect",
	"google.golang.org/protobuf/",
	"golang.org/x/sys/",
	"github.com/creack/pty",
	"github.com/fsnotify/fsnotify",
	"github.com/spacesandbox/space/api/",
	"github.com/spacesandbox/space/internal/agent",
	"github.com/spacesandbox/space/cmd/space-agent",
}

func TestDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !isAllowed(pkg) {
			t.Errorf("space-agent depends on %s, which is not allowed", pkg)
		}
	}
}

func isAllowed(pkg string) bool {
	for _, a := range allowed {
		if pkg == strings.TrimSuffix(a, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(a, "/")+"/") {
			return true
		}
	}
	return false
}

func TestDisallowedExamples(t *testing.T) {
	for _, pkg := range []string{
		"github.com/spacesandbox/space/internal/daemon",
		"github.com/spacesandbox/space/internal/agentx",
		"github.com/spf13/cobra",
		"golang.org/x/net/http2",
	} {
		if isAllowed(pkg) {
			t.Errorf("%s should not be allowed", pkg)
		}
	}
}

func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cmd := exec.Command("go", "build", "-o", t.TempDir()+"/space-agent", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
}
