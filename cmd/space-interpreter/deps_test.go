package main

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed are the only non-standard packages the interpreter may link: it
// runs in every code-interpreter sandbox, so it stays small (ZeroMQ and
// what it needs) and never imports the control plane.
var allowed = []string{
	"github.com/go-zeromq/zmq4",
	"golang.org/x/sync/",
	"golang.org/x/text/",
	"github.com/spacesandbox/space/internal/interpreter",
	"github.com/spacesandbox/space/internal/accesstoken", // standard library only: the token spaced derives for it
	"github.com/spacesandbox/space/cmd/space-interpreter",
	// The token spaced derives for the interpreter: an HMAC, standard
	// library only.
	"github.com/spacesandbox/space/internal/accesstoken",
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
			t.Errorf("space-interpreter depends on %s, which is not allowed", pkg)
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
		"github.com/spacesandbox/space/internal/agent",
		"github.com/spacesandbox/space/internal/interpreterx",
		"github.com/go-zeromq/goczmq/v4",
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
	bin := t.TempDir() + "/space-interpreter"
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	// Static: no program interpreter, so it runs in any template image.
	out, err := exec.Command("file", bin).Output()
	if err == nil && !strings.Contains(string(out), "statically linked") {
		t.Errorf("not static: %s", out)
	}
}
