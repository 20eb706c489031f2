package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/client"
)

func (a *app) metricsCmd() *cobra.Command {
	var (
		since  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "metrics ID",
		Short: "Print a sandbox's CPU, memory and disk over time",
		Long: "Print the samples spaced took of a sandbox (every few seconds while it runs; the last hour\n" +
			"as taken, older ones as one-minute summaries), oldest first.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := client.MetricsOptions{}
			if since > 0 {
				opts.Start = time.Now().Add(-since)
			}
			m, err := a.client().SandboxMetrics(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, m)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "TIME\tCPU\tMEMORY\tCACHE\tDISK\t")
			for _, s := range m.Samples {
				fmt.Fprintf(tw, "%s\t%5.1f%% of %d\t%s / %s\t%s\t%s / %s\t\n", s.Time.Local().Format("15:04:05"),
					s.CPUUsedPct, s.CPUCount, mib(s.MemUsed), mib(s.MemTotal), mib(s.MemCache), mib(s.DiskUsed), mib(s.DiskTotal))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only the samples of this last stretch (e.g. 10m)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON the API returns")
	return cmd
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func (a *app) logsCmd() *cobra.Command {
	var (
		level  string
		search string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a sandbox's log",
		Long: "Print a sandbox's log, oldest first: its agent's lines (processes started and ended,\n" +
			"warnings, errors) and its lifecycle as spaced saw it (created, paused, resumed, ended).",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := client.LogsOptions{Level: level, Search: search}
			if limit > 0 { // the newest limit lines, printed oldest first
				opts.Backward, opts.Limit = true, limit
			}
			lines, err := a.client().SandboxLogs(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			if opts.Backward {
				for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
					lines[i], lines[j] = lines[j], lines[i]
				}
			}
			if asJSON {
				if lines == nil {
					lines = []client.LogLine{}
				}
				return writeJSON(a.stdout, lines)
			}
			for _, l := range lines {
				fmt.Fprintf(a.stdout, "%s %-5s %-6s %s%s\n", l.Time.Local().Format("2006-01-02 15:04:05.000"),
					strings.ToUpper(string(l.Level)), l.Fields["source"], l.Message, fields(l.Fields))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&level, "level", "", "the lowest level printed: debug, info, warn or error")
	f.StringVar(&search, "search", "", "only lines whose message contains this")
	f.IntVarP(&limit, "tail", "n", 0, "only the last N lines")
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// fields prints a line's fields but its source, sorted.
func fields(f map[string]string) string {
	var keys []string
	for k := range f {
		if k != "source" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, f[k])
	}
	return b.String()
}
