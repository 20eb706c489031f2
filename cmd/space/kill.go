package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) killCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "kill ID...",
		Short: "Kill sandboxes",
		Args:  minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.client()
			failed := false
			for _, id := range args {
				if err := c.KillSandbox(cmd.Context(), id); err != nil {
					fmt.Fprintf(a.stderr, "space: %v\n", err)
					failed = true
				}
			}
			if failed {
				return exitError{1}
			}
			return nil
		},
	}
}
