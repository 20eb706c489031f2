package archtest

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sandboxBinaries are the programs that run inside sandboxes, each with the
// only non-standard packages it may link (tailscale's tstest/deptest is the
// model): they stay small, and never link the control plane, whose code and
// secrets have no business in a sandbox. An entry matches itself and the
// packages below it.
var sandboxBinaries = []struct {
	cmd     string
	why     string
	allowed []string
}{
	{
		cmd: "space-agent", why: "in every sandbox: Connect-RPC, a PTY and file watches",
		allowed: []string{
			"connectrpc.com/connect",
			"google.golang.org/protobuf",
			"golang.org/x/sys",
			"github.com/creack/pty",
			"github.com/fsnotify/fsnotify",
			"github.com/spacesandbox/space/api",
			"github.com/spacesandbox/space/internal/agent",
			"github.com/spacesandbox/space/cmd/space-agent",
		},
	},
	{
		cmd: "space-interpreter", why: "in every code-interpreter sandbox: ZeroMQ and what it needs",
		allowed: []string{
			"github.com/go-zeromq/zmq4",
			"golang.org/x/sync",
			"golang.org/x/text",
			"github.com/spacesandbox/space/internal/interpreter",
			// The token spaced derives for it: an HMAC, standard library only.
			"github.com/spacesandbox/space/internal/accesstoken",
			"github.com/spacesandbox/space/cmd/space-interpreter",
		},
	},
	{
		cmd: "space-desktop", why: "in every desktop sandbox: a pure-Go X11 client",
		allowed: []string{
			"github.com/jezek/xgb",
			// The screenshot's deflate (internal/desktopd/png.go): pure
			// Go, about twice as fast as compress/flate at BestSpeed.
			"github.com/klauspost/compress",
			"github.com/spacesandbox/space/internal/desktopd",
			"github.com/spacesandbox/space/internal/computeruse",
			"github.com/spacesandbox/space/internal/accesstoken",
			"github.com/spacesandbox/space/cmd/space-desktop",
		},
	},
	{
		cmd: "space-mcp-gateway", why: "in every mcp-gateway sandbox: the official Go MCP SDK and what it needs",
		allowed: []string{
			"github.com/modelcontextprotocol/go-sdk",
			"github.com/google/jsonschema-go",
			"github.com/segmentio/asm",
			"github.com/segmentio/encoding",
			"github.com/yosida95/uritemplate",
			"golang.org/x/oauth2",
			"golang.org/x/sync",
			"golang.org/x/sys",
			"golang.org/x/time",
			"github.com/spacesandbox/space/internal/mcpgateway",
			"github.com/spacesandbox/space/cmd/space-mcp-gateway",
		},
	},
}

func TestSandboxBinaryDeps(t *testing.T) {
	for _, b := range sandboxBinaries {
		t.Run(b.cmd, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/cmd/"+b.cmd)
			cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			pkgs := strings.Fields(string(out))
			if len(pkgs) < 2 {
				t.Fatalf("go list found only %v", pkgs)
			}
			for _, pkg := range pkgs {
				if !allowedIn(b.allowed, pkg) {
					t.Errorf("%s (%s) depends on %s, which is not allowed", b.cmd, b.why, pkg)
				}
			}
		})
	}
}

// TestSandboxBinariesStatic: each builds without cgo into a static
// executable (no program interpreter), so it runs in any template's image
// whatever its libc.
func TestSandboxBinariesStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	for _, b := range sandboxBinaries {
		t.Run(b.cmd, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), b.cmd)
			cmd := exec.Command("go", "build", "-o", bin, module+"/cmd/"+b.cmd)
			cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("static build: %v\n%s", err, out)
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s has a program interpreter: not static", b.cmd)
				}
			}
		})
	}
}

// TestSandboxBinaryDepsCanFail: the control plane, a look-alike of an
// allowed package and a library no sandbox binary needs are refused.
func TestSandboxBinaryDepsCanFail(t *testing.T) {
	for _, pkg := range []string{
		"github.com/spacesandbox/space/internal/daemon",
		"github.com/spacesandbox/space/internal/agentx",
		"github.com/spf13/cobra",
		"golang.org/x/net/http2",
	} {
		for _, b := range sandboxBinaries {
			if allowedIn(b.allowed, pkg) {
				t.Errorf("%s: %s should not be allowed", b.cmd, pkg)
			}
		}
	}
}

func allowedIn(allowed []string, pkg string) bool {
	for _, a := range allowed {
		if pkg == a || strings.HasPrefix(pkg, a+"/") {
			return true
		}
	}
	return false
}
