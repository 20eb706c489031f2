// Command spaced is the SPACE daemon: it owns the sandboxes of one node and
// serves the public API.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/daemon"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "keygen" {
		if err := daemon.Keygen(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "spaced keygen:", err)
			os.Exit(2)
		}
		return
	}
	cfg, err := config.Load(os.Args[1:], os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spaced:", err)
		os.Exit(2)
	}
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		slog.Error("spaced failed", "err", err)
		os.Exit(1)
	}
}
