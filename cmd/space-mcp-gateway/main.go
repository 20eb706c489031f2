// Command space-mcp-gateway is E2B's MCP gateway inside a sandbox,
// installed as /usr/local/bin/mcp-gateway in the mcp-gateway template (see
// internal/mcpgateway). The E2B SDKs run, as root, after create:
//
//	mcp-gateway --config '<json>'     (token in GATEWAY_ACCESS_TOKEN)
//
// which starts the gateway in the background and exits 0 once it serves,
// or 1 with the reason on stderr. `mcp-gateway pull <server>...` (E2B's
// template step addMcpServer) checks the servers are installed.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/mcpgateway"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mcp-gateway", flag.ContinueOnError)
	config := fs.String("config", "", "the sandbox's MCP config: a JSON object of server names to settings")
	root := fs.String("root", mcpgateway.DefaultRoot, "where the catalog's servers are installed")
	addr := fs.String("addr", mcpgateway.DefaultAddr, "listen address of the gateway")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cat := mcpgateway.NewCatalog(*root)
	switch cmd := fs.Arg(0); {
	case cmd == "serve":
		ready := os.NewFile(3, "ready") // from Launch
		log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return mcpgateway.Serve(ctx, cat, mcpgateway.DefaultPaths, *addr, os.Stdin, ready, log)
	case cmd == "pull":
		for _, name := range fs.Args()[1:] {
			if _, ok := cat[name]; !ok {
				return fmt.Errorf("MCP server %q is not installed in this template (it has the catalog's servers that need no network; see docs/e2b.md)", name)
			}
		}
		return nil
	case cmd != "":
		return fmt.Errorf("unknown command %q: mcp-gateway --config '<json>' | pull <server>...", cmd)
	case *config == "":
		return fmt.Errorf("usage: mcp-gateway --config '<json>'")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	return mcpgateway.Launch([]byte(*config), os.Getenv(mcpgateway.TokenEnv), cat, mcpgateway.DefaultPaths, self,
		[]string{"-root", *root, "-addr", *addr, "serve"})
}
