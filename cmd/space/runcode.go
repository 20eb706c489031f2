package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

type runCodeOpts struct {
	contextID, language string
	timeout             int
	env                 []string
	outDir              string
}

func (a *app) runCodeCmd() *cobra.Command {
	var o runCodeOpts
	cmd := &cobra.Command{
		Use:   "run-code ID [CODE|-]",
		Short: "Run code in a sandbox's code interpreter",
		Long: "Runs CODE (or stdin, when CODE is - or absent) in the code interpreter of a sandbox made\n" +
			"from code-interpreter-v1, streaming its stdout and stderr. Each result's text is printed\n" +
			"(the cell's value last); png, jpeg, svg and pdf results are saved as result-N.EXT in\n" +
			"--out-dir and their paths printed on stderr. A cell that raises prints its traceback on\n" +
			"stderr and exits 1. A dropped connection is resumed; the cell runs on meanwhile.\n" +
			"Interrupt once to interrupt the cell (KeyboardInterrupt), twice to stop waiting.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("want a sandbox ID and at most one CODE argument, got %d argument(s)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			code := "-"
			if len(args) == 2 {
				code = args[1]
			}
			if code == "-" {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("read code from stdin: %w", err)
				}
				code = string(b)
			}
			if strings.TrimSpace(code) == "" {
				return usagef("no code to run")
			}
			return a.runCode(cmd.Context(), o, args[0], code)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.contextID, "context", "", "context to run in (default: the language's default context)")
	f.StringVar(&o.language, "language", "", "language of the default context to run in (default python)")
	f.IntVar(&o.timeout, "timeout", 0, "interrupt the cell after SECONDS (0: no limit)")
	f.StringArrayVar(&o.env, "env", nil, "environment variable KEY=VALUE for this cell (repeatable)")
	f.StringVar(&o.outDir, "out-dir", ".", "directory for image and pdf results")
	return cmd
}

func (a *app) runCode(ctx context.Context, o runCodeOpts, id, code string) error {
	env, err := parseKV("env", o.env)
	if err != nil {
		return err
	}
	if o.contextID != "" && o.language != "" {
		return usagef("give --context or --language, not both")
	}
	c := a.client()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.RunCodeResumable(ctx, id, client.CodeRequest{
		Code: code, Language: o.language, ContextID: o.contextID, Env: env, TimeoutSeconds: o.timeout,
	}, client.ResumeOptions{
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

	var execID atomic.Value
	execID.Store("")
	stop := a.interruptCode(ctx, c, id, &execID, cancel)
	defer stop()

	out := codeOutput{a: a, dir: o.outDir}
	for {
		ev, err := stream.Next()
		if err == io.EOF {
			return fmt.Errorf("the cell's stream ended without its end")
		}
		if err != nil {
			return err
		}
		switch ev.Type {
		case client.CodeEventExecution:
			execID.Store(ev.ExecutionID)
		case client.CodeEventStdout:
			if _, err := io.WriteString(a.stdout, ev.Text); err != nil {
				return fmt.Errorf("write stdout: %w", err)
			}
		case client.CodeEventStderr:
			if _, err := io.WriteString(a.stderr, ev.Text); err != nil {
				return fmt.Errorf("write stderr: %w", err)
			}
		case client.CodeEventResult:
			if err := out.result(ev.Result); err != nil {
				return err
			}
		case client.CodeEventError:
			out.failed = true
			tb := ev.Error.Traceback
			if tb == "" {
				tb = ev.Error.Error()
			}
			fmt.Fprintln(a.stderr, strings.TrimRight(tb, "\n"))
		case client.CodeEventGap:
			fmt.Fprintf(a.stderr, "space: %d lines of output were dropped by the interpreter before they could be replayed\n", ev.Dropped)
		case client.CodeEventEnd, client.CodeEventUnexpectedEnd:
			if err := out.flush(); err != nil {
				return err
			}
			if ev.Type == client.CodeEventUnexpectedEnd {
				fmt.Fprintln(a.stderr, "space: the kernel died; the context's next cell gets a new one")
				return exitError{1}
			}
			if out.failed {
				return exitError{1}
			}
			return nil
		}
	}
}

// codeOutput prints results: text at once, the main result's when the
// cell ends (it comes last in any case), files as they come.
type codeOutput struct {
	a      *app
	dir    string
	n      int // results with files so far
	main   *client.CodeResult
	failed bool
}

func (o *codeOutput) result(r *client.CodeResult) error {
	if err := o.save(r); err != nil {
		return err
	}
	if r.IsMainResult {
		o.main = r
		return nil
	}
	return o.printText(r)
}

func (o *codeOutput) flush() error {
	if o.main == nil {
		return nil
	}
	m := o.main
	o.main = nil
	return o.printText(m)
}

func (o *codeOutput) printText(r *client.CodeResult) error {
	if r.Text == "" {
		return nil
	}
	text := r.Text
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if _, err := io.WriteString(o.a.stdout, text); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	return nil
}

// save writes each file format of r to dir/result-N.EXT and names it on
// stderr.
func (o *codeOutput) save(r *client.CodeResult) error {
	numbered := false
	for _, f := range []struct{ format, ext string }{{"png", "png"}, {"jpeg", "jpg"}, {"svg", "svg"}, {"pdf", "pdf"}} {
		b, ok, err := r.Bytes(f.format)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if !numbered {
			o.n++
			numbered = true
		}
		path := filepath.Join(o.dir, fmt.Sprintf("result-%d.%s", o.n, f.ext))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("save a %s result: %w", f.format, err)
		}
		fmt.Fprintln(o.a.stderr, path)
	}
	return nil
}

// interruptCode turns the first interrupt into an interrupt of the cell,
// and the second into giving up waiting (the cell may run on).
func (a *app) interruptCode(ctx context.Context, c *client.Client, id string, execID *atomic.Value, cancel func()) (stop func()) {
	ch := make(chan os.Signal, 2)
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
				ex := execID.Load().(string)
				if n >= 2 || ex == "" {
					cancel()
					continue
				}
				if _, err := c.InterruptCode(ctx, id, ex); err != nil {
					fmt.Fprintf(a.stderr, "space: %v\n", err)
				}
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}
