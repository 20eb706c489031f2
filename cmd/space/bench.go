package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spacesandbox/space/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var (
		quick, asJSON bool
		cfg           = bench.Full()
		runsc         string
		templates     string
		soak          bool
		checkpoints   bool
		templatesRun  bool
		interpreter   string
		e2bPython     string
		ckptCfg       = bench.CheckpointConfig{Runs: 10, SizesMiB: []int{0, 256}}
		soakCfg       = bench.SoakConfig{Cycles: 1000, Concurrency: 16}
		all           bool
		desktop       bool
		rest          bool
		restCfg       = bench.RestConfig{N: 40, Held: 20, Window: 30 * time.Second, Hibernated: 20}
		reconnects    bool
		settle        time.Duration
		reconCfg      = bench.ReconnectConfig{Streams: 1000, Sandboxes: 10, Duration: 60 * time.Second,
			Interval: time.Second, CutMeanBytes: 1000, Seed: 1}
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure create, time-to-interactive, exec, burst, cold-create, churn and density figures of a running spaced",
		Long: `bench drives the spaced at SPACE_ADDR through the public API and prints medians and
percentiles (milliseconds), each beside its anchor measured in the same run. It must run on
spaced's host: the density figure reads /proc/meminfo, and the raw runsc anchors (root only)
run runsc itself. The burst's anchor (a full pool) resizes the base pool through the admin
API for a while and puts it back. --all adds the pause/resume and (with --e2b) the E2B SDK
figures to the same result.

With --soak it runs create -> exec -> write file -> read it back -> kill cycles instead,
--concurrency at a time, and reports errors, per-step latencies and spaced's RSS, open
file descriptors and goroutines (from its /metrics) over the first and last cycles. It
exits non-zero when any cycle failed or memory or descriptors were not flat.

With --reconnects it runs --reconnect-streams command streams at once over
--reconnect-sandboxes sandboxes, each client through a loopback proxy that resets its
connections at random (--cut-mean-bytes, --cut-mean-life) and resuming with Last-Event-ID,
and reports the reconnects per second, the cut-to-next-event latency and spaced's CPU. It
exits non-zero when any line was lost, repeated or out of order, or a stream did not end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := bench.Settle(cmd.Context(), settle, cmd.ErrOrStderr()); err != nil {
				return err
			}
			if reconnects {
				if quick {
					reconCfg.Streams, reconCfg.Sandboxes, reconCfg.Duration = 40, 2, 10*time.Second
				}
				reconCfg.Addr, reconCfg.APIKey = a.addrAndKey()
				reconCfg.Log = cmd.ErrOrStderr()
				return runReconnects(cmd, a, reconCfg, asJSON)
			}
			if rest {
				if quick {
					restCfg.N, restCfg.Held, restCfg.Window, restCfg.Hibernated = 5, 4, 5*time.Second, 3
				}
				restCfg.Log = cmd.ErrOrStderr()
				restCfg.Runsc, restCfg.RootFS = rawAnchor(runsc, templates)
				return runRest(cmd, a, restCfg, asJSON)
			}
			if soak {
				soakCfg.Log = cmd.ErrOrStderr()
				soakCfg.Runsc, soakCfg.RootFS = rawAnchor(runsc, templates)
				return runSoak(cmd, a, soakCfg, asJSON)
			}
			e2bN := func() int {
				switch {
				case quick:
					return 4
				case cmd.Flags().Changed("n"):
					return cfg.N
				}
				return 40
			}
			if desktop {
				dc := bench.DesktopConfig{N: 10, Calls: 30, Python: e2bPython, Log: cmd.ErrOrStderr()}
				if quick {
					dc.N, dc.Calls = 2, 5
				}
				if cmd.Flags().Changed("n") {
					dc.N = cfg.N
				}
				dc.Addr, dc.APIKey = a.addrAndKey()
				if dc.Runsc, _ = rawAnchor(runsc, templates); dc.Runsc != "" {
					dc.TemplatesDir = templates
				}
				return runDesktopBench(cmd, a, dc, asJSON)
			}
			if e2bPython != "" && !all {
				ec := bench.E2BConfig{Python: e2bPython, N: e2bN(), Log: cmd.ErrOrStderr()}
				ec.Addr, ec.APIKey = a.addrAndKey()
				return runE2BBench(cmd, a, ec, asJSON)
			}
			if templatesRun {
				n := cfg.N
				if quick {
					n = 3
				} else if !cmd.Flags().Changed("n") {
					n = 20
				}
				tc := bench.TemplateConfig{N: n, Interpreter: interpreter, Log: cmd.ErrOrStderr()}
				tc.Runsc, tc.RootFS = rawAnchor(runsc, templates)
				return runTemplateBench(cmd, a, tc, asJSON)
			}
			if quick {
				ckptCfg.Runs = 2
			}
			ckptCfg.Log = cmd.ErrOrStderr()
			ckptCfg.Runsc, ckptCfg.RootFS = rawAnchor(runsc, templates)
			if checkpoints {
				return runCheckpoints(cmd, a, ckptCfg, asJSON)
			}
			if quick {
				q := bench.Quick()
				for _, f := range []struct {
					flag     string
					dst, val *int
				}{
					{"n", &cfg.N, &q.N}, {"burst", &cfg.Burst, &q.Burst}, {"cold", &cfg.Cold, &q.Cold}, {"idle", &cfg.Idle, &q.Idle},
					{"density-runs", &cfg.DensityRuns, &q.DensityRuns}, {"churn-cycles", &cfg.ChurnCycles, &q.ChurnCycles},
				} {
					if !cmd.Flags().Changed(f.flag) {
						*f.dst = *f.val
					}
				}
			}
			cfg.Runsc, cfg.RootFS = rawAnchor(runsc, templates)
			cfg.Log = cmd.ErrOrStderr()
			res, err := bench.Run(cmd.Context(), a.client(), cfg)
			if err != nil {
				return err
			}
			if all {
				if res.Checkpoints, err = bench.Checkpoints(cmd.Context(), a.client(), ckptCfg); err != nil {
					return err
				}
				if e2bPython != "" {
					ec := bench.E2BConfig{Python: e2bPython, N: e2bN(), Log: cmd.ErrOrStderr()}
					ec.Addr, ec.APIKey = a.addrAndKey()
					if res.E2B, err = bench.E2B(cmd.Context(), a.client(), ec); err != nil {
						return err
					}
				}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			return printResult(cmd, res)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small counts (what CI runs)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.DurationVar(&settle, "settle", time.Minute, "before measuring, wait up to this long for the host's CPUs to be quiet (under a quarter of a core busy over a second), so a previous run's teardown is not measured (0: start at once)")
	f.IntVarP(&cfg.N, "n", "n", cfg.N, "sequential creates, time-to-interactive and exec runs")
	f.IntVar(&cfg.Burst, "burst", cfg.Burst, "creates fired at once")
	f.IntVar(&cfg.Cold, "cold", cfg.Cold, "cold creates and raw runsc runs")
	f.IntVar(&cfg.Idle, "idle", cfg.Idle, "idle sandboxes held for the density figures (memory per sandbox, create and exec with them held)")
	f.IntVar(&cfg.DensityRuns, "density-runs", cfg.DensityRuns, "creates and execs timed with the box empty and with the idle sandboxes held")
	f.IntVar(&cfg.ChurnCycles, "churn-cycles", cfg.ChurnCycles, "create/exec/write/read/kill cycles of the churn figure (0 skips it)")
	f.IntVar(&cfg.ChurnConcurrency, "churn-concurrency", cfg.ChurnConcurrency, "churn cycles at a time")
	f.BoolVar(&all, "all", false, "also measure pause/resume (as --checkpoint) and, with --e2b PYTHON, the E2B SDK figure, into the same result")
	f.StringVar(&runsc, "runsc", "/usr/local/lib/space/bin/runsc", "runsc for the raw comparison (root only)")
	f.StringVar(&templates, "templates-dir", "/var/lib/space/templates", "templates, for the raw comparison's root filesystem")
	f.BoolVar(&rest, "rest", false, "measure the rest tier instead: wake of a frozen sandbox to its first command beside an awake one's, wake of a hibernated one beside raw runsc restore, and the host CPU and memory an idle sandbox costs awake, frozen and hibernated")
	f.IntVar(&restCfg.N, "rest-wakes", restCfg.N, "wakes timed by --rest")
	f.IntVar(&restCfg.Held, "rest-held", restCfg.Held, "idle sandboxes whose CPU --rest measures")
	f.IntVar(&restCfg.Hibernated, "rest-hibernated", restCfg.Hibernated, "wakes of a hibernated sandbox timed by --rest (0: none)")
	f.IntVar(&restCfg.Density, "rest-density", 0, "with --rest, also hold this many hibernated sandboxes while --rest-busy others run commands in a loop: memory and spaced CPU per sandbox, wake, busy exec and create meanwhile")
	f.IntVar(&restCfg.Busy, "rest-busy", 10, "sandboxes running exec true in a loop during --rest-density")
	f.DurationVar(&restCfg.Window, "rest-window", restCfg.Window, "how long --rest measures CPU, each time")
	f.BoolVar(&reconnects, "reconnects", false, "measure reconnects instead: command streams at once, each through a loopback proxy that cuts its connections at random and resuming with Last-Event-ID; checks that every line came exactly once and reports the reconnects per second spaced sustains (exits non-zero when an event was lost or repeated)")
	f.IntVar(&reconCfg.Streams, "reconnect-streams", reconCfg.Streams, "command streams at once for --reconnects")
	f.IntVar(&reconCfg.Sandboxes, "reconnect-sandboxes", reconCfg.Sandboxes, "sandboxes the --reconnects streams are spread over")
	f.DurationVar(&reconCfg.Duration, "reconnect-duration", reconCfg.Duration, "how long the --reconnects streams run")
	f.DurationVar(&reconCfg.Interval, "reconnect-interval", reconCfg.Interval, "time between two lines of a --reconnects command")
	f.IntVar(&reconCfg.CutMeanBytes, "cut-mean-bytes", reconCfg.CutMeanBytes, "--reconnects: mean bytes a connection carries back before the proxy resets it (0: no cut by bytes)")
	f.DurationVar(&reconCfg.CutMeanLife, "cut-mean-life", reconCfg.CutMeanLife, "--reconnects: mean lifetime of a connection before the proxy resets it (0: no cut by time)")
	f.Uint64Var(&reconCfg.Seed, "cut-seed", reconCfg.Seed, "--reconnects: seed of the proxy's cuts")
	f.BoolVar(&soak, "soak", false, "run the soak (create/exec/file/kill cycles) instead of the figures")
	f.IntVar(&soakCfg.Cycles, "cycles", soakCfg.Cycles, "soak cycles")
	f.IntVar(&soakCfg.Concurrency, "concurrency", soakCfg.Concurrency, "soak cycles at a time")
	f.IntVar(&soakCfg.Window, "window", 0, "cycles at the start and end whose daemon figures are compared (0: min(100, cycles/4))")
	f.BoolVar(&checkpoints, "checkpoint", false, "measure pause (checkpoint to the object store) and resume instead, idle and holding 256 MiB")
	f.IntVar(&ckptCfg.Runs, "checkpoint-runs", ckptCfg.Runs, "pause+resume cycles per memory size")
	f.IntSliceVar(&ckptCfg.SizesMiB, "checkpoint-sizes", ckptCfg.SizesMiB, "memory held by the sandbox, MiB per size measured")
	f.BoolVar(&templatesRun, "templates", false, "measure template figures instead: a fully cached 10-step rebuild, create to a started template's first answer (with and without its pool), the code interpreter's first result and round trip")
	f.StringVar(&e2bPython, "e2b", "", "measure the E2B Python SDK's Sandbox.create() + commands.run() against the native API instead (with --all: as well), with this python (one that has the e2b package, e.g. test/e2b/.venv/bin/python)")
	f.BoolVar(&desktop, "desktop", false, "measure the desktop template's figures instead: create to first screenshot (pooled when the daemon has a desktop pool), native screenshot and click beside scrot and xdotool by command (and, with --e2b PYTHON having e2b_desktop, the E2B Desktop SDK), memory with and without Chromium, pause and resume (-n sets the creates and cycles)")
	f.StringVar(&interpreter, "interpreter", "code-interpreter-v1", "code-interpreter template for --templates (\"\" skips it)")
	return cmd
}

func printResult(cmd *cobra.Command, res *bench.Result) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tvalue\n")
	for _, row := range []struct {
		name string
		v    float64
	}{
		{"create p50 (ms)", res.CreateP50}, {"create p90 (ms)", res.CreateP90}, {"create p99 (ms)", res.CreateP99},
		{"time to interactive p50 (ms)", res.TTIP50}, {"time to interactive p90 (ms)", res.TTIP90},
		{"  anchor: create p50 + exec p50 (ms)", res.TTIAnchor}, {"  time to interactive / anchor", res.TTIRatio},
		{"exec true p50 (ms)", res.ExecP50}, {"exec true p90 (ms)", res.ExecP90}, {"exec true p95 (ms)", res.ExecP95},
		{"  anchor: a tiny static program spawned inside the sandbox p50 (ms)", res.ExecStaticSpawnP50}, {"  exec / static spawn", res.ExecStaticRatio},
		{"  the static program through the API p50 (ms)", res.ExecStaticAPIP50},
		{"  sh -c true spawned inside the sandbox p50 (ms)", res.ExecInSandboxP50}, {"  exec / sh spawn", res.ExecRatio},
		{"  runsc exec of sh -c true in a raw container p50 (ms)", res.RawRunscExecP50},
		{"pool ready at burst start", float64(res.BurstPoolReady)},
		{fmt.Sprintf("burst of %d p50 (ms)", res.Burst), res.BurstP50}, {fmt.Sprintf("burst of %d p95 (ms)", res.Burst), res.BurstP95},
		{"  anchor: pool ready at the full-pool burst", float64(res.BurstFullPoolReady)},
		{"  anchor: burst against a full pool p50 (ms)", res.BurstFullPoolP50}, {"  anchor: burst against a full pool p95 (ms)", res.BurstFullPoolP95},
		{"  burst / full pool (p50)", res.BurstRatio},
		{"cold create p50 (ms)", res.ColdCreateP50}, {"raw runsc create+start p50 (ms)", res.RawRunscP50},
		{"cold overhead ratio", res.ColdOverheadRatio},
		{"  anchor: raw runsc run --detach p50 (ms)", res.RawRunscRunP50}, {"  cold create / raw run", res.ColdOverRunRatio},
		{fmt.Sprintf("churn at concurrency %d (cycles/s)", res.ChurnConcurrency), res.ChurnCyclesPerSecond},
		{"  churn create p50 (ms)", res.ChurnCreateP50}, {"  churn create p95 (ms)", res.ChurnCreateP95}, {"  churn exec p50 (ms)", res.ChurnExecP50},
		{"  churn cycles failed", float64(res.ChurnErrors)},
		{"  anchor: raw runsc create+start+delete (cycles/s)", res.ChurnRawCyclesPerSec}, {"  churn / raw", res.ChurnRatio},
		{"  anchor: raw runsc run+delete (cycles/s)", res.ChurnRawRunCyclesPerSec}, {"  churn / raw run", res.ChurnRunRatio},
		{fmt.Sprintf("idle MiB per sandbox (%d held)", res.Idle), res.IdleMiBPerSandbox},
		{"  create p50, box empty / held (ms)", res.DensityCreateP50Empty}, {"", res.DensityCreateP50Held}, {"  held / empty", res.DensityCreateRatio},
		{"  exec p50, box empty / held (ms)", res.DensityExecP50Empty}, {"", res.DensityExecP50Held}, {"  held / empty", res.DensityExecRatio},
		{"load average at start / end", res.LoadStart}, {"", res.LoadEnd},
	} {
		fmt.Fprintf(w, "%s\t%.2f\n", row.name, row.v)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if res.Checkpoints != nil {
		if err := printCheckpoints(cmd, res.Checkpoints); err != nil {
			return err
		}
	}
	if res.E2B != nil {
		return printE2B(cmd, res.E2B)
	}
	return nil
}

func runTemplateBench(cmd *cobra.Command, a *app, cfg bench.TemplateConfig, asJSON bool) error {
	cfg.Addr, cfg.APIKey = a.addrAndKey()
	res, err := bench.Templates(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure (%d runs)\tp50\tp90\n", res.N)
	for _, row := range []struct {
		name     string
		p50, p90 float64
	}{
		{fmt.Sprintf("rebuild, %d steps all cached (ms)", res.RebuildSteps), res.RebuildP50, res.RebuildP90},
		{"started HTTP template: create to first answer, no pool (ms)", res.HTTPFirstAnswerP50, res.HTTPFirstAnswerP90},
		{"  of which the create (ms)", res.HTTPCreateP50, -1},
		{"  anchor: raw runsc restore of the same server (ms)", res.RawRestoreP50, -1},
		{"  first answer / raw restore", res.RestoreOverheadRatio, -1},
		{"started HTTP template: create to first answer, pooled (ms)", res.HTTPPooledFirstAnswerP50, res.HTTPPooledFirstAnswerP90},
		{fmt.Sprintf("code interpreter: create to first result, pooled %v (ms)", res.CodePooled), res.CodeFirstResultP50, res.CodeFirstResultP90},
		{"code interpreter: run_code round trip, warm context (ms)", res.CodeRoundTripP50, res.CodeRoundTripP90},
		{"  anchor: the same from inside the sandbox (ms)", res.CodeInSandboxRoundTripP50, -1},
		{"code interpreter: new context to first result (ms)", res.CodeNewContextP50, -1},
	} {
		fmt.Fprintf(w, "%s\t%s\t%s\n", row.name, figure(row.p50), figure(row.p90))
	}
	return w.Flush()
}

func runE2BBench(cmd *cobra.Command, a *app, cfg bench.E2BConfig, asJSON bool) error {
	res, err := bench.E2B(cmd.Context(), a.client(), cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	return printE2B(cmd, res)
}

func printE2B(cmd *cobra.Command, res *bench.E2BFigures) error {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "figure (%d runs each)\tp50\tp90\n", res.N)
	fmt.Fprintf(w, "E2B SDK: Sandbox.create() + commands.run(\"echo hi\") (ms)\t%.1f\t%.1f\n", res.SDKTotalP50, res.SDKTotalP90)
	fmt.Fprintf(w, "  of which Sandbox.create() (ms)\t%.1f\t-\n", res.SDKCreateP50)
	fmt.Fprintf(w, "  of which commands.run() (ms)\t%.1f\t-\n", res.SDKRunP50)
	fmt.Fprintf(w, "  anchor: native create + echo hi (ms)\t%.1f\t%.1f\n", res.NativeP50, res.NativeP90)
	fmt.Fprintf(w, "  SDK / native\t%.2f\t-\n", res.SDKNativeRate)
	return w.Flush()
}

// rawAnchor returns runsc and the base template's root filesystem for the
// raw runsc anchors, or "" when they cannot run here (not root, no runsc).
func rawAnchor(runsc, templates string) (string, string) {
	if os.Geteuid() != 0 {
		return "", ""
	}
	if _, err := os.Stat(runsc); err != nil {
		return "", ""
	}
	rootfs, err := filepath.EvalSymlinks(filepath.Join(templates, "base", "current"))
	if err != nil {
		return "", ""
	}
	return runsc, rootfs
}

// figure prints a measurement, or "-" when it was not taken.
func figure(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}
