// Command space-interpreter is the code interpreter inside a sandbox: E2B's
// code-interpreter API on port 49999, running cells on Jupyter kernels it
// starts and owns (see internal/interpreter).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/interpreter"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg := interpreter.Config{Logger: log}
	fs := flag.NewFlagSet("space-interpreter", flag.ExitOnError)
	fs.StringVar(&cfg.Addr, "addr", interpreter.DefaultAddr, "listen address")
	fs.StringVar(&cfg.Python, "python", "python3", "Python with ipykernel (and bash_kernel, for bash) installed")
	fs.StringVar(&cfg.Deno, "deno", "", "deno binary, for javascript and typescript contexts (empty: those languages are refused)")
	fs.StringVar(&cfg.R, "r", "", "R with IRkernel installed, for r contexts (empty: r is refused)")
	fs.StringVar(&cfg.Java, "java", "java", "a JDK's java (JShell is needed), for java contexts")
	fs.StringVar(&cfg.JJava, "jjava", "", "JJava's kernel jar (jjava.jar), for java contexts (empty: java is refused)")
	fs.StringVar(&cfg.RuntimeDir, "runtime-dir", "/run/space-interpreter", "directory for kernel sockets and the IPython profile")
	fs.StringVar(&cfg.Cwd, "cwd", "", "default context's working directory (default: the kernel user's home)")
	fs.StringVar(&cfg.StatePath, "state", "/run/space-agent/state.json", "the agent's state file (access token, env vars); empty: no auth")
	fs.BoolVar(&cfg.RequireContextToken, "require-context-token", false, "refuse /contexts requests without X-Access-Token (the E2B SDKs send none there on a public sandbox)")
	fs.IntVar(&cfg.MaxContexts, "max-contexts", 0, "most contexts (kernels) at once, the default ones included; 0: one per 128 MiB of the sandbox's memory (4 to 64)")
	fs.IntVar(&cfg.MaxAnonymousContexts, "max-anonymous-contexts", 0, "most of them made by requests without a token; 0: as many idle 200 MiB kernels as fit in half the sandbox's memory (at least 1)")
	fs.StringVar(&cfg.KernelUser, "kernel-user", "", "run kernels as this user (default: the server's user)")
	fs.Int64Var(&cfg.KernelAddressSpace, "kernel-address-space", -1, "RLIMIT_AS per kernel in bytes; -1: from the sandbox's memory, 0: none")
	fs.Int64Var(&cfg.MemoryReserve, "memory-reserve", -1, "free memory in bytes under which the biggest kernel running a cell is killed; -1: from the sandbox's memory, 0: none")
	fs.BoolVar(&cfg.PlainKernels, "plain-kernels", false, "keep ipykernel's per-cell flushes and reply sleep (a benchmark's anchor)")
	fs.Int64Var(&cfg.MaxOutputBytes, "max-output-bytes", 32<<20, "output kept per execution; -1: no limit")
	fs.DurationVar(&cfg.DefaultTimeout, "timeout", 0, "interrupt a cell after this long unless the request says (0: never)")
	fs.IntVar(&cfg.KeepExecutions, "keep-executions", 64, "resumable executions (/executions) kept; running ones are never dropped")
	fs.Int64Var(&cfg.ExecutionLogBytes, "execution-log-bytes", 4<<20, "lines kept per resumable execution; the oldest are dropped first")
	fs.Int64Var(&cfg.ExecutionLogsBytes, "execution-logs-bytes", 64<<20, "lines kept by all resumable executions; past it finished ones are dropped, oldest first")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := interpreter.Run(ctx, cfg); err != nil {
		log.Error("space-interpreter failed", "err", err)
		os.Exit(1)
	}
}
