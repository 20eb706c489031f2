package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/spacesandbox/space/client"
)

func (a *app) shellCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "shell ID",
		Short: "Open an interactive terminal in a sandbox",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.shell(cmd.Context(), args[0], user)
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "user to log in as (default: the daemon's, user)")
	return cmd
}

func (a *app) shell(ctx context.Context, id, user string) error {
	opts := client.PTYOptions{User: user}
	outFD, outIsTerm := terminalFD(a.stdout)
	if outIsTerm {
		if cols, rows, err := term.GetSize(outFD); err == nil {
			opts.Cols, opts.Rows = cols, rows
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := a.client().OpenPTY(ctx, id, opts)
	if err != nil {
		return err
	}
	defer p.Close()

	if inFD, ok := terminalFD(a.stdin); ok {
		old, err := term.MakeRaw(inFD)
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer term.Restore(inFD, old)
	}
	if outIsTerm {
		stop := watchResize(func() {
			if cols, rows, err := term.GetSize(outFD); err == nil {
				_ = p.Resize(cols, rows)
			}
		})
		defer stop()
	}
	_, stdinIsTerm := terminalFD(a.stdin)
	go func() {
		_, err := io.Copy(p, a.stdin)
		if err == nil && !stdinIsTerm {
			// Piped input ended: ^D tells the remote shell, as a user would.
			_, _ = p.Write([]byte{4})
		}
	}()
	if _, err := io.Copy(a.stdout, p); err != nil {
		return fmt.Errorf("terminal output: %w", err)
	}
	code, err := p.Wait()
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}
