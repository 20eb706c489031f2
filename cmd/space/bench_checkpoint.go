package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

// runCheckpoints runs the pause/resume benchmark and prints its figures.
func runCheckpoints(cmd *cobra.Command, a *app, cfg bench.CheckpointConfig, asJSON bool) error {
	res, err := bench.Checkpoints(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
			Runs  int                       `json:"runs"`
			Sizes []bench.CheckpointFigures `json:"checkpoints"`
		}{cfg.Runs, res})
	}
	return printCheckpoints(cmd, res)
}

func printCheckpoints(cmd *cobra.Command, res []bench.CheckpointFigures) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "memory held (MiB)\tcheckpoint (MiB)\tpause p50 (ms)\traw checkpoint p50 (ms)\tratio\tresume p50 (ms)\tresume to exec p50 (ms)\traw restore / to exec p50 (ms)\tratio\n")
	for _, f := range res {
		fmt.Fprintf(w, "%d\t%.2f\t%.1f\t%s\t%s\t%.1f\t%.1f\t%s / %s\t%s\n", f.SizeMiB, f.CheckpointMiB, f.PauseP50, anchor(f.RawCheckpointP50), anchor(f.PauseRatio),
			f.ResumeP50, f.ResumeToExecP50, anchor(f.RawRestoreP50), anchor(f.RawRestoreExecP50), anchor(f.ResumeRatio))
	}
	return w.Flush()
}

// anchor prints an anchor figure, or "-" when none was measured.
func anchor(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
