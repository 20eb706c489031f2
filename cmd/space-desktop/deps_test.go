package main

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed are the only non-standard packages space-desktop may link: it
// runs in every desktop sandbox, so it stays small (a pure-Go X11 client)
// and never imports the control plane.
var allowed = []string{
	"github.com/jezek/xgb",
	// The screenshot's deflate (internal/desktopd/png.go: its zlib and
	// flate, and their internal packages): pure Go, about twice as fast
	// as compress/flate at BestSpeed.
	"github.com/klauspost/compress",
	"github.com/spacesandbox/space/cmd/space-desktop",
	"github.com/spacesandbox/space/internal/desktopd",
	"github.com/spacesandbox/space/internal/computeruse",
	// The token spaced derives for it: an HMAC, standard library only.
	"github.com/spacesandbox/space/internal/accesstoken",
}

func TestDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 3 {
		t.Fatalf("go list found only %v", pkgs)
	}
	for _, pkg := range pkgs {
		if !isAllowed(pkg) {
			t.Errorf("space-desktop depends on %s, which is not allowed", pkg)
		}
	}
}

func isAllowed(pkg string) bool {
	for _, a := range allowed {
		if pkg == a || strings.HasPrefix(pkg, a+"/") {
			return true
		}
	}
	return false
}
