// Command space-desktop is the native computer-use API's server inside a
// desktop sandbox (see internal/desktopd): the desktop template's start
// command runs it as root (it reads the agent's state file) beside the
// display.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/desktopd"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg := desktopd.Config{Logger: log}
	fs := flag.NewFlagSet("space-desktop", flag.ExitOnError)
	fs.StringVar(&cfg.Addr, "addr", fmt.Sprintf("0.0.0.0:%d", computeruse.Port), "listen address")
	fs.StringVar(&cfg.Socket, "socket", desktopd.DefaultSocket, "the X server's Unix socket (@name: abstract)")
	fs.StringVar(&cfg.StatePath, "state", "/run/space-agent/state.json", "the agent's state file (access token); empty: no auth")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := desktopd.Run(ctx, cfg); err != nil {
		log.Error("space-desktop failed", "err", err)
		os.Exit(1)
	}
}
