package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

// runSoak runs the soak and prints its result; a soak with failed cycles
// or growing memory or descriptors is an error (after the figures).
func runSoak(cmd *cobra.Command, a *app, cfg bench.SoakConfig, asJSON bool) error {
	res, err := bench.Soak(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "soak\t%d cycles, %d at a time, %.1f s, %d errors\n", res.Cycles, res.Concurrency, res.Seconds, res.Errors)
		fmt.Fprintf(w, "cycles per second\t%.2f (raw runsc create+start+delete at the same concurrency: %s; ratio %s; raw runsc run+delete: %s; ratio %s)\n",
			res.CyclesPerSecond, anchor(res.RawCyclesPerSecond), anchor(res.ChurnRatio), anchor(res.RawRunCyclesPerSecond), anchor(res.ChurnRunRatio))
		fmt.Fprintf(w, "step\tp50 (ms)\tp95 (ms)\terrors\n")
		for _, step := range []string{"create", "exec", "write", "read", "kill", "metrics"} {
			if f, ok := res.Steps[step]; ok {
				fmt.Fprintf(w, "%s\t%.2f\t%.2f\t%d\n", step, f.P50, f.P95, f.Errors)
			}
		}
		fmt.Fprintf(w, "spaced\tRSS MiB\topen fds\tgoroutines\n")
		for _, row := range []struct {
			name string
			f    bench.DaemonFigures
		}{{"before", res.Before}, {fmt.Sprintf("first %d cycles", res.Window), res.First}, {fmt.Sprintf("last %d cycles", res.Window), res.Last}, {"after", res.After}} {
			fmt.Fprintf(w, "%s\t%.1f\t%.0f\t%.0f\n", row.name, row.f.RSSMiB, row.f.OpenFDs, row.f.Goroutines)
		}
		fmt.Fprintf(w, "flat\tRSS %t, fds %t (%s)\n", res.RSSFlat, res.FDsFlat, res.Tolerance)
		for _, e := range res.FirstErrors {
			fmt.Fprintf(w, "error\t%s\n", e)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	switch {
	case res.Errors > 0:
		return fmt.Errorf("soak: %d of %d cycles' steps failed", res.Errors, res.Cycles)
	case !res.RSSFlat || !res.FDsFlat:
		return fmt.Errorf("soak: spaced's memory or descriptors grew (RSS %.1f -> %.1f MiB, fds %.0f -> %.0f)",
			res.First.RSSMiB, res.Last.RSSMiB, res.First.OpenFDs, res.Last.OpenFDs)
	}
	return nil
}
