package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// space node: the nodes of a cluster (admin key; cluster mode).
func (a *app) nodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List a cluster's nodes, drain one (admin key)",
		Args:  exactArgs(0),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the nodes with their leases and sandboxes",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := a.client().Nodes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, ns)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tSANDBOXES\tLEASE")
			for _, n := range ns {
				state := "alive"
				switch {
				case !n.Alive:
					state = "lapsed"
				case n.Draining:
					state = "draining"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", n.ID, n.Address, state, n.Info.Sandboxes, time.Until(n.LeaseUntil).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var drainJSON bool
	drain := &cobra.Command{
		Use:   "drain <node>",
		Short: "Move a node's running sandboxes to other nodes; it takes no new ones",
		Long: "Each running sandbox is paused to the object store and resumed on the least loaded\n" +
			"other node, processes and open files included, under the same id and token. A\n" +
			"sandbox whose move fails stays paused (any node resumes it). Undo with undrain\n" +
			"(or a restart of the node).",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			r, err := a.client().DrainNode(cmd.Context(), pos[0])
			if err != nil {
				return err
			}
			if drainJSON {
				return writeJSON(a.stdout, r)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX\tTO\tPAUSE\tRESUME\tTOTAL\tERROR")
			failed := 0
			for _, m := range r.Moves {
				fmt.Fprintf(tw, "%s\t%s\t%dms\t%dms\t%dms\t%s\n", m.Sandbox, m.To, m.PauseMS, m.ResumeMS, m.TotalMS, m.Error)
				if m.Error != "" {
					failed++
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d moves failed (those sandboxes are paused)", failed, len(r.Moves))
			}
			return nil
		},
	}
	drain.Flags().BoolVar(&drainJSON, "json", false, "print JSON")
	undrain := &cobra.Command{
		Use:   "undrain <node>",
		Short: "Let a drained node take sandboxes again",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			return a.client().UndrainNode(cmd.Context(), pos[0])
		},
	}
	cmd.AddCommand(ls, drain, undrain)
	return cmd
}
