package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) timeoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "timeout ID SECONDS",
		Short: "Make a sandbox expire SECONDS from now (0: now, paused if it pauses at its timeout)",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var secs int
			if _, err := fmt.Sscan(args[1], &secs); err != nil || secs < 0 {
				return usagef("SECONDS %q: want 0 or a positive integer", args[1])
			}
			sb, err := a.client().SetTimeout(cmd.Context(), args[0], secs)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s expires at %s\n", sb.ID, sb.ExpiresAt.Local().Format("2006-01-02 15:04:05 MST"))
			return err
		},
	}
}
