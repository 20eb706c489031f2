// Command spaced is the SPACE daemon: it owns the sandboxes of one node and
// serves the public API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/daemon"
	"github.com/spacesandbox/space/internal/seal"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "keygen" {
		if err := keygen(os.Args[2:], os.Stdout); err != nil {
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

// keygen is `spaced keygen FILE`: a fresh platform key for the nodes of a
// cluster to share (FILE "-" writes it to stdout, for a Secret). spaced
// makes its own at the first start when the file is missing, which serves
// one node; nodes sharing an object store need this one key.
func keygen(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: spaced keygen FILE (or - for stdout)")
	}
	if args[0] != "-" {
		return seal.NewPlatformKey(args[0])
	}
	dir, err := os.MkdirTemp("", "space-keygen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "platform.json")
	if err := seal.NewPlatformKey(path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
