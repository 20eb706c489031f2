package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

type execOpts struct {
	user, cwd  string
	env        []string
	timeout    int
	background bool
	stdin      bool
}

func (a *app) execCmd() *cobra.Command {
	var o execOpts
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox and stream its output",
		Long: "Runs CMD in the sandbox, streaming its stdout and stderr, and exits with its exit code\n" +
			"(128+N when signal N ended it). A single CMD is run by /bin/sh -c; several words are\n" +
			"run as argv. Stdin is forwarded when it is not a terminal (or with --stdin).\n" +
			"Interrupt once to send SIGTERM, twice for SIGKILL.",
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return usagef("want one sandbox ID before --, got %d arguments", dash)
			}
			return minArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("stdin") {
				o.stdin = !isTerminal(a.stdin)
			}
			return a.exec(cmd.Context(), o, args[0], args[1:])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.user, "user", "", "user to run as (default: the daemon's, user)")
	f.StringVar(&o.cwd, "cwd", "", "working directory")
	f.StringArrayVar(&o.env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.IntVar(&o.timeout, "timeout", 0, "kill the command after SECONDS (0: no limit)")
	f.BoolVar(&o.background, "background", false, "start the command and print its pid")
	f.BoolVarP(&o.stdin, "stdin", "i", false, "forward stdin (default: when stdin is not a terminal)")
	return cmd
}

func (a *app) exec(ctx context.Context, o execOpts, id string, argv []string) error {
	env, err := parseKV("env", o.env)
	if err != nil {
		return err
	}
	req := client.CommandRequest{User: o.user, Cwd: o.cwd, Env: env, TimeoutSeconds: o.timeout}
	if len(argv) == 1 {
		req.Cmd = argv[0]
	} else {
		req.Argv = argv
	}
	c := a.client()
	if o.background {
		bg, err := c.StartBackground(ctx, id, req)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(a.stdout, bg.PID)
		return err
	}
	req.KeepStdinOpen = o.stdin

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.RunCommandResumable(ctx, id, req, client.ResumeOptions{
		Retries: 5,
		Backoff: 500 * time.Millisecond,
		OnResume: func(attempt int, err error) {
			fmt.Fprintf(a.stderr, "space: connection lost (%v); resuming, attempt %d\n", err, attempt)
		},
	})
	if err != nil {
		return err
	}
	defer stream.Close()

	var pid atomic.Int64
	stopSignals := a.forwardSignals(ctx, c, id, &pid, cancel)
	defer stopSignals()
	for {
		ev, err := stream.Next()
		if err == io.EOF {
			return fmt.Errorf("command stream ended without an exit status")
		}
		if err != nil {
			return err
		}
		switch ev.Type {
		case client.EventStart:
			if pid.Swap(int64(ev.PID)) == 0 && o.stdin {
				go a.pumpStdin(ctx, c, id, ev.PID)
			}
		case client.EventStdout, client.EventPTY:
			if _, err := a.stdout.Write(ev.Data); err != nil {
				return fmt.Errorf("write stdout: %w", err)
			}
		case client.EventStderr:
			if _, err := a.stderr.Write(ev.Data); err != nil {
				return fmt.Errorf("write stderr: %w", err)
			}
		case client.EventGap:
			fmt.Fprintln(a.stderr, "space: some output was dropped by the sandbox before it could be replayed")
		case client.EventEnd:
			// A plain non-zero exit speaks through the exit code; only say
			// more when the command did not exit by itself (a signal, a
			// failure to start).
			if !ev.Exit.Exited && ev.Exit.Error != "" {
				fmt.Fprintf(a.stderr, "space: %s\n", ev.Exit.Error)
			}
			if code := ev.Exit.Code(); code != 0 {
				return exitError{code}
			}
			return nil
		}
	}
}

// pumpStdin copies the CLI's stdin to the command, then closes the command's.
func (a *app) pumpStdin(ctx context.Context, c *client.Client, id string, pid int) {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := a.stdin.Read(buf)
		if n > 0 {
			if err := c.SendStdin(ctx, id, pid, buf[:n]); err != nil {
				if ctx.Err() == nil && !client.IsNotFound(err) {
					fmt.Fprintf(a.stderr, "space: %v\n", err)
				}
				return
			}
		}
		if rerr != nil {
			// A command that ended before its input did (one that never
			// reads it) has no stdin left to close: not an error.
			if err := c.CloseStdin(ctx, id, pid); err != nil && ctx.Err() == nil && !client.IsNotFound(err) {
				fmt.Fprintf(a.stderr, "space: %v\n", err)
			}
			return
		}
	}
}

// forwardSignals turns the first interrupt into SIGTERM for the command, the
// second into SIGKILL, and the third gives up waiting.
func (a *app) forwardSignals(ctx context.Context, c *client.Client, id string, pid *atomic.Int64, cancel func()) (stop func()) {
	ch := make(chan os.Signal, 3)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-done:
				return
			case <-ch:
				n++
				p := int(pid.Load())
				if n >= 3 || p == 0 {
					cancel()
					continue
				}
				sig := client.SIGTERM
				if n == 2 {
					sig = client.SIGKILL
				}
				if err := c.Signal(ctx, id, p, sig); err != nil {
					fmt.Fprintf(a.stderr, "space: %v\n", err)
				}
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}
