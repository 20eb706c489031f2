// Command space-agent is the agent inside each sandbox. As PID 1 it re-execs
// itself as "space-agent serve" and stays behind as a reaping init.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/agent"
	"github.com/spacesandbox/space/internal/agent/reaper"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	args := os.Args[1:]
	serve := len(args) > 0 && args[0] == "serve"
	if serve {
		args = args[1:]
	}

	fset := flag.NewFlagSet("space-agent", flag.ExitOnError)
	cfg := agent.Config{Logger: log}
	fset.StringVar(&cfg.Addr, "addr", agent.DefaultAddr, "TCP listen address")
	fset.StringVar(&cfg.StatePath, "state", agent.DefaultStatePath, "file that persists Init's state (empty: none)")
	fset.StringVar(&cfg.DefaultUser, "default-user", agent.DefaultUser, "user processes run as unless told otherwise")
	fset.IntVar(&cfg.ProcessBufferBytes, "process-buffer-bytes", 4<<20, "output kept per process for reconnects")
	version := fset.Bool("version", false, "print the version and exit")
	_ = fset.Parse(args)
	if *version {
		fmt.Println(agent.Version)
		return
	}

	// Read the boot token once and drop it so no child ever inherits it.
	token := os.Getenv(agent.TokenEnv)
	_ = os.Unsetenv(agent.TokenEnv)

	if os.Getpid() == 1 && !serve {
		env := os.Environ()
		if token != "" {
			env = append(env, agent.TokenEnv+"="+token)
		}
		os.Exit(reaper.Run(reaper.Options{
			Path:   "/proc/self/exe",
			Args:   append([]string{os.Args[0], "serve"}, args...),
			Env:    env,
			Logger: log,
		}))
	}

	cfg.BootToken = token
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx, cfg); err != nil {
		log.Error("space-agent failed", "err", err)
		os.Exit(1)
	}
}
