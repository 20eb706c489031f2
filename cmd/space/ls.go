package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

func (a *app) lsCmd() *cobra.Command {
	var (
		states string
		meta   []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := client.ListOptions{}
			for s := range strings.SplitSeq(states, ",") {
				if s = strings.TrimSpace(s); s != "" {
					opts.States = append(opts.States, s)
				}
			}
			var err error
			if opts.Metadata, err = parseKV("meta", meta); err != nil {
				return err
			}
			all, err := a.client().ListAllSandboxes(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				if all == nil {
					all = []client.Sandbox{}
				}
				return writeJSON(a.stdout, all)
			}
			return writeTable(a, all, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&states, "state", "", "comma-separated states to list (default running)")
	f.StringArrayVar(&meta, "meta", nil, "only sandboxes with metadata KEY=VALUE (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func writeTable(a *app, all []client.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tCREATED\tEXPIRES")
	for _, sb := range all {
		expires := relTime(now, sb.ExpiresAt)
		if sb.State != client.StateRunning && sb.State != client.StateCreating {
			expires = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Template, sb.State, relTime(now, sb.CreatedAt), expires)
	}
	return tw.Flush()
}

// relTime says how far t is from now: "3m ago", "in 4m".
func relTime(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	if d < 0 {
		return shortDuration(-d) + " ago"
	}
	return "in " + shortDuration(d)
}

func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
