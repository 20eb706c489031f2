package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

// runReconnects runs space bench --reconnects. It fails when a stream lost
// or repeated an event, or did not end well: the figures of a run that
// dropped events are not a result.
func runReconnects(cmd *cobra.Command, a *app, cfg bench.ReconnectConfig, asJSON bool) error {
	res, err := bench.Reconnects(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
			return err
		}
	} else if err := printReconnects(cmd, res); err != nil {
		return err
	}
	if res.Lost+res.Repeated+res.OutOfOrder+res.LostEvents+res.Gaps > 0 || res.MissingEnd+res.Failed > 0 {
		return fmt.Errorf("reconnects: %d lines lost, %d repeated, %d out of order, %d event ids skipped, %d gaps, %d streams without their end, %d failed (first: %s)",
			res.Lost, res.Repeated, res.OutOfOrder, res.LostEvents, res.Gaps, res.MissingEnd, res.Failed, res.FirstError)
	}
	return nil
}

func printReconnects(cmd *cobra.Command, res *bench.ReconnectFigures) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tvalue\n")
	for _, row := range []struct {
		name string
		v    float64
	}{
		{fmt.Sprintf("streams (over %d sandboxes)", res.Sandboxes), float64(res.Streams)},
		{"  started in (s)", res.StartS},
		{"events", float64(res.Events)}, {"  numbered lines", float64(res.Lines)},
		{"proxy connections", float64(res.Conns)}, {"  cut", float64(res.Cuts)},
		{"reconnects (Last-Event-ID)", float64(res.Reconnects)}, {"  attempts", float64(res.ResumeAttempts)},
		{"  cut before the start event, started again (same idempotency key)", float64(res.Restarts)},
		{"    of them answered with the command already started", float64(res.Replayed)},
		{fmt.Sprintf("reconnects/s, steady (%.0f s with every stream running)", res.SteadyS), res.ReconnectsPerS},
		{"reconnects/s, whole run", res.ReconnectsPerSAll},
		{"lost lines", float64(res.Lost)}, {"repeated lines", float64(res.Repeated)}, {"out of order", float64(res.OutOfOrder)},
		{"event ids skipped", float64(res.LostEvents)}, {"gap events", float64(res.Gaps)},
		{"streams without their end", float64(res.MissingEnd)}, {"streams failed", float64(res.Failed)},
		{fmt.Sprintf("cut to first event after, event in flight, p50 (ms, %d)", res.ReconnectInFlight), res.ReconnectP50}, {"  p99 (ms)", res.ReconnectP99},
		{"cut to first event after, all, p50 (ms)", res.ReconnectAllP50}, {"  p99 (ms)", res.ReconnectAllP99},
		{"spaced CPU (ms/s)", res.SpacedCPUMsPerS},
		{"sandboxes' CPU, their cgroups (ms/s; -1: not read)", res.SandboxCPUMsPerS},
		{"bench CPU, clients and proxy (ms/s)", res.BenchCPUMsPerS},
		{"spaced max RSS (MiB)", res.SpacedRSSMiBMax}, {"  max open fds", res.SpacedFDsMax}, {"  max goroutines", res.SpacedGoroutinesMax},
		{"bench max open fds", float64(res.BenchFDsMax)},
		{"load average at start / end", res.LoadStart}, {"", res.LoadEnd},
	} {
		fmt.Fprintf(w, "%s\t%.2f\n", row.name, row.v)
	}
	return w.Flush()
}
