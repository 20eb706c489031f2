package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

const defaultAddr = "http://127.0.0.1:7070"

// app is what every command shares: where to talk and the process's stdio.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	addr, apiKey   string // flag values
	root           *cobra.Command
	// signals, if set (tests), stands in for Ctrl-C while a build is
	// followed.
	signals chan os.Signal
}

// exitError ends the CLI with a code and no message (a remote command's exit code).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// usageError is a bad command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run executes the CLI and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(stderr, "space: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "space",
		Short:         "Create and use SPACE sandboxes",
		Long:          "space talks to a SPACE daemon at $SPACE_ADDR (default " + defaultAddr + ") with the API key in $SPACE_API_KEY.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q (see space --help)", args[0])
			}
			return cmd.Help()
		},
	}
	a.root = root
	root.PersistentFlags().StringVar(&a.addr, "addr", "", "daemon address (default $SPACE_ADDR or "+defaultAddr+")")
	root.PersistentFlags().StringVar(&a.apiKey, "api-key", "", "API key (default $SPACE_API_KEY)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		a.createCmd(), a.lsCmd(), a.infoCmd(), a.execCmd(), a.shellCmd(),
		a.runCodeCmd(), a.cpCmd(), a.killCmd(), a.timeoutCmd(), a.metricsCmd(), a.logsCmd(), a.templateCmd(), a.volumeCmd(), a.desktopCmd(), a.benchCmd(), a.adminCmd(), a.nodeCmd(),
	)
	return root
}

// client builds the API client from flags, then the environment.
func (a *app) client() *client.Client {
	addr, key := a.settings()
	return client.New(addr, key, client.WithUserAgent("space-cli"))
}

// settings are the daemon's address and the API key: flags, then the
// environment, then the default address.
func (a *app) settings() (addr, key string) {
	addr = a.addr
	if addr == "" {
		addr = a.getenv("SPACE_ADDR")
	}
	if addr == "" {
		addr = defaultAddr
	}
	key = a.apiKey
	if key == "" {
		key = a.getenv("SPACE_API_KEY")
	}
	return addr, key
}

// addrAndKey is settings with the address as host:port.
func (a *app) addrAndKey() (string, string) {
	addr, key := a.settings()
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
	return strings.TrimSuffix(addr, "/"), key
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %d argument(s), got %d", n, len(args))
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("want at least %d argument(s), got %d", n, len(args))
		}
		return nil
	}
}
