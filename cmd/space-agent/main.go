// Command space-agent is the agent inside each sandbox, and its init: as
// PID 1 it also reaps the orphans it inherits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/agent"
)

func main() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: stderrLevel()}))
	args := os.Args[1:]

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
	// The boot token also stays in the environment the agent was started
	// with (/proc/1/environ). Not dumpable, the agent's environ, memory and
	// fds are closed even to root inside, which lacks CAP_SYS_PTRACE. (A
	// child started as another user would make it so anyway: until its
	// exec it shares the agent's mm, and its setuid clears the mm's
	// dumpable flag; this makes it so from the start.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Warn("could not make the agent non-dumpable", "err", err)
	}

	cfg.BootToken = token
	// As a sandbox's init, the agent inherits every orphan and reaps them
	// itself (see process.Manager.ReapOrphans).
	cfg.ReapOrphans = os.Getpid() == 1
	if cfg.ReapOrphans {
		// Linux drops signals to an init that has no handler for them, but
		// the Go runtime handles all of them and exits on SIGHUP, SIGQUIT
		// and SIGABRT: `kill -HUP 1` inside would end the whole sandbox.
		// They are caught and dropped, not ignored: an ignored signal
		// stays ignored in every process the agent starts.
		dropped := make(chan os.Signal, 8)
		signal.Notify(dropped, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT)
		go func() {
			for range dropped {
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx, cfg); err != nil {
		log.Error("space-agent failed", "err", err)
		os.Exit(1)
	}
}

// LogLevelEnv sets the lowest level the agent writes to its stderr:
// debug, info, warn (the default) or error. Its journal (GET /logs, the
// sandbox's log) keeps info and above whatever it says.
const LogLevelEnv = "SPACE_AGENT_LOG_LEVEL"

// stderrLevel is the level LogLevelEnv names. In a sandbox the agent's
// stderr is runsc's, /dev/null: a line there is a write into the sentry
// for nobody, and every command logs two (its start and its end), which
// the journal keeps anyway.
func stderrLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv(LogLevelEnv))); err != nil {
		return slog.LevelWarn
	}
	return l
}
