// Command spaced is the SPACE daemon: it owns the sandboxes of one node and
// serves the public API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/daemon"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "keygen" {
		if err := daemon.Keygen(args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "spaced keygen:", err)
			os.Exit(2)
		}
		return
	}
	printConfig := len(args) > 1 && args[0] == "config" && args[1] == "print"
	if printConfig {
		args = args[2:]
	}
	cfg, err := config.Load(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spaced:", err)
		os.Exit(2)
	}
	if printConfig {
		os.Stdout.Write(cfg.Print())
		return
	}
	var level slog.Level
	level.UnmarshalText([]byte(cfg.LogLevel))
	// The one logger: every part is handed it (no package logs through
	// slog's default).
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg, log); err != nil {
		log.Error("spaced failed", "err", err)
		os.Exit(1)
	}
}
