package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

// runDesktopBench runs the desktop benchmark and prints its figures.
func runDesktopBench(cmd *cobra.Command, a *app, cfg bench.DesktopConfig, asJSON bool) error {
	res, err := bench.Desktop(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tp50\tp90\tanchor p50\tanchor p90\tanchor\n")
	row := func(name string, p50, p90, a50, a90 float64, what string) {
		fmt.Fprintf(w, "%s\t%.1f\t%s\t%s\t%s\t%s\n", name, p50, anchor(p90), anchor(a50), anchor(a90), what)
	}
	pooled := "create (no desktop pool) to first screenshot (ms)"
	if res.Pooled {
		pooled = "create (pooled) to first screenshot (ms)"
	}
	row(pooled, res.CreateToScreenshotP50, res.CreateToScreenshotP90, res.SDKCreateToScreenshotP50, res.SDKCreateToScreenshotP90, "E2B Desktop SDK create + screenshot()")
	row("native screenshot 1024x768 (ms)", res.ScreenshotP50, res.ScreenshotP90, res.CommandScreenshotP50, res.CommandScreenshotP90, "scrot + download by command")
	row("", 0, 0, res.SDKScreenshotP50, res.SDKScreenshotP90, "E2B Desktop SDK screenshot()")
	row("native click (ms)", res.ClickP50, res.ClickP90, res.CommandClickP50, res.CommandClickP90, "xdotool by command")
	row("", 0, 0, res.SDKClickP50, res.SDKClickP90, "E2B Desktop SDK left_click()")
	row("native click, back to back (ms)", res.ClickBackToBackP50, res.ClickBackToBackP90, 0, 0, "")
	row("native click with screenshot (ms)", res.ClickWithScreenshotP50, res.ClickWithScreenshotP90, 0, 0, "")
	row("viewer connection to the RFB version (ms)", res.VNCHandshakeP50, res.VNCHandshakeP90, 0, 0, fmt.Sprintf("the first, starting x11vnc: %.1f", res.VNCFirstMs))
	row("pause, with Chromium (ms)", res.PauseP50, 0, res.RawCheckpointP50, 0, "raw runsc checkpoint of the same desktop")
	row("resume, to first screenshot (ms)", res.ResumeP50, 0, res.RawRestoreP50, 0, "raw runsc restore")
	row("", res.ResumeToScreenshotP50, 0, res.RawRestoreToExecP50, 0, "raw restore to first exec")
	fmt.Fprintf(w, "host memory, idle desktop (MiB)\t%.1f\n", res.IdleMiB)
	fmt.Fprintf(w, "host memory, with Chromium on a page (MiB)\t%.1f\n", res.ChromiumMiB)
	fmt.Fprintf(w, "checkpoint size (MiB)\t%.1f\n", res.CheckpointMiB)
	fmt.Fprintf(w, "load average\t%.1f -> %.1f\n", res.LoadStart, res.LoadEnd)
	return w.Flush()
}
