package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

func runRest(cmd *cobra.Command, a *app, cfg bench.RestConfig, asJSON bool) error {
	res, err := bench.Rest(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tvalue\n")
	for _, row := range []struct {
		name string
		v    float64
	}{
		{fmt.Sprintf("wake a frozen sandbox to its first exec true p50 (ms, %d runs)", res.N), res.WakeExecP50},
		{"  p99 (ms)", res.WakeExecP99},
		{"  anchor: exec true on an awake sandbox, same run, p50 (ms)", res.AwakeExecP50}, {"  p99 (ms)", res.AwakeExecP99},
		{"  wake over awake, p50 (ms)", res.WakeOverAwakeP50},
		{fmt.Sprintf("wake a hibernated sandbox to its first exec true p50 (ms, %d runs)", res.HibernatedN), res.HibernatedWakeExecP50},
		{"  p99 (ms)", res.HibernatedWakeExecP99},
		{"  anchor: raw runsc restore of an idle container + first exec, same run, p50 (ms)", res.RawRestoreExecP50}, {"  p99 (ms)", res.RawRestoreExecP99},
		{"  hibernated wake / raw restore, p50", res.HibernatedWakeRatio},
		{fmt.Sprintf("host busy CPU, no sandbox held (ms/s over %.0f s)", res.WindowSeconds), res.HostCPUEmpty},
		{fmt.Sprintf("host CPU per idle sandbox, awake (ms/s, %d held)", res.Held), res.HostCPUPerAwake},
		{"host CPU per idle sandbox, frozen (ms/s)", res.HostCPUPerFrozen},
		{"  its own cgroup's CPU, awake (ms/s)", res.CgroupCPUPerAwake}, {"  frozen (ms/s)", res.CgroupCPUPerFrozen},
		{"spaced's own CPU, no sandbox held (ms/s)", res.SpacedCPUEmpty},
		{"  per idle sandbox, awake (ms/s)", res.SpacedCPUPerAwake}, {"  frozen (ms/s)", res.SpacedCPUPerFrozen},
		{"host CPU per idle sandbox, hibernated (ms/s)", res.HostCPUPerHibernated}, {"  spaced's own (ms/s)", res.SpacedCPUPerHibernated},
		{"host memory used per idle sandbox, awake (MiB)", res.HostMemPerAwake}, {"  frozen (MiB)", res.HostMemPerFrozen},
		{"  hibernated (MiB)", res.HostMemPerHibernated}, {"  its image on disk (MiB)", res.HibernationImageMiB},
		{"load average at start / end", res.LoadStart}, {"", res.LoadEnd},
	} {
		fmt.Fprintf(w, "%s\t%.2f\n", row.name, row.v)
	}
	if d := res.Density; d != nil {
		for _, row := range []struct {
			name string
			v    float64
		}{
			{fmt.Sprintf("density: %d hibernated with %d busy; made and hibernated in (s)", d.Hibernated, d.Busy), d.HoldSeconds},
			{"  host memory used per hibernated sandbox (MiB)", d.HostMemPerMiB}, {"  image on disk (MiB)", d.ImageMiB},
			{fmt.Sprintf("  spaced's CPU per hibernated sandbox (ms/s over %.0f s)", d.SpacedCPUWindowS), d.SpacedCPUPerMs},
			{fmt.Sprintf("  wake of a random one to its first exec true p50 (ms, %d)", d.Wakes), d.WakeExecP50}, {"  p99 (ms)", d.WakeExecP99},
			{"  exec true in a busy sandbox meanwhile p50 (ms)", d.BusyExecP50}, {"  p99 (ms)", d.BusyExecP99},
			{"  warm create meanwhile p50 (ms)", d.CreateP50},
		} {
			fmt.Fprintf(w, "%s\t%.2f\n", row.name, row.v)
		}
	}
	return w.Flush()
}
