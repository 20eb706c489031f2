package main

import "github.com/spf13/cobra"

func (a *app) infoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info ID",
		Short: "Print a sandbox as JSON",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := a.client().GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, sb)
		},
	}
}
