package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestSandboxTelemetry: a sandbox's metrics over time (sampled from the
// host every SPACE_METRICS_INTERVAL, 1 s in this suite) show it busy on its
// CPU and holding what it wrote, and its log has its lifecycle and its
// agent's process lines; both outlive a pause and the sandbox's end, and
// the CLI prints them.
func TestSandboxTelemetry(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 3*time.Minute)
	sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 300, CPU: 1, MemoryMB: 256, DiskMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID) })

	sh(t, d, sb.ID, "head -c 16777216 /dev/urandom > /home/user/blob")
	// One CPU spins until a sample shows it: at least 10% of it (most of
	// it on a quiet machine; a host loaded by the other suites gave a 6 s
	// spin less than half, CI run 28; idle is under 1%), then it stops.
	sh(t, d, sb.ID, "nohup timeout 120 sh -c 'while [ ! -e /tmp/stop-spin ]; do :; done' >/dev/null 2>&1 &")
	var busy *client.MetricSample
	deadline := time.Now().Add(30 * time.Second)
	for busy == nil && time.Now().Before(deadline) {
		m, err := d.Client.SandboxMetrics(ctx, sb.ID, client.MetricsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.IntervalSeconds != 1 {
			t.Fatalf("interval %v, want 1", m.IntervalSeconds)
		}
		for i, s := range m.Samples {
			if s.CPUUsedPct >= 10 {
				busy = &m.Samples[i]
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	sh(t, d, sb.ID, "touch /tmp/stop-spin")
	stopped := time.Now()
	if busy == nil {
		t.Fatal("no sample shows the busy loop")
	}
	if busy.CPUCount != 1 || busy.CPUUsedPct > 100 || busy.MemTotal != 256<<20 || busy.MemUsed == 0 || busy.MemUsed > busy.MemTotal ||
		busy.DiskTotal != 512<<20 || busy.DiskUsed < 16<<20 || busy.DiskUsed > 64<<20 || time.Since(busy.Time) > time.Minute {
		t.Errorf("busy sample %+v", busy)
	}
	// Once the loop is over, the sandbox is idle again. A sample's CPU is
	// over the time since the one before it, which a sampler running late
	// on a loaded host stretches: only a sample whose predecessor was
	// taken after the loop ended covers idle time alone (CI run of stop
	// 41 read a 1.5 s window whose one sample still held the loop's end).
	var idle *client.MetricSample
	var all *client.Metrics
	for deadline := time.Now().Add(20 * time.Second); idle == nil && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if all, err = d.Client.SandboxMetrics(ctx, sb.ID, client.MetricsOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(all.Samples); i++ {
			if all.Samples[i-1].Time.After(stopped) {
				idle = &all.Samples[i]
				break
			}
		}
	}
	if idle == nil {
		t.Fatalf("no sample covers only the time after the loop ended: %+v", all.Samples)
	}
	if idle.CPUUsedPct > 30 {
		t.Errorf("the first sample after the loop ended shows it still busy: %+v (all: %+v)", idle, all.Samples)
	}
	all, err = d.Client.SandboxMetrics(ctx, sb.ID, client.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all.Samples); i++ {
		if !all.Samples[i].Time.After(all.Samples[i-1].Time) {
			t.Fatalf("samples out of order at %d: %+v", i, all.Samples)
		}
	}

	// The log: spaced's lifecycle lines and the agent's process lines.
	run(t, d, sb.ID, client.CommandRequest{Cmd: "echo telemetry-probe; exit 4"})
	if _, err := d.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 300); err != nil {
		t.Fatal(err)
	}
	// Sampling goes on after a resume (a new instance, a new baseline).
	waitSamples(t, d, sb.ID, time.Now(), 2)
	logs, err := d.Client.SandboxLogs(ctx, sb.ID, client.LogsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var started, ended *client.LogLine
	var lifecycle []string
	for i, l := range logs {
		switch {
		case l.Fields["source"] == "spaced":
			lifecycle = append(lifecycle, l.Message)
		case l.Fields["source"] != "agent":
			t.Errorf("line of no known source: %+v", l)
		case l.Fields["event_type"] == "process_start" && strings.Contains(l.Fields["command"], "telemetry-probe"):
			started = &logs[i]
		case started != nil && l.Fields["event_type"] == "process_end" && l.Fields["pid"] == started.Fields["pid"]:
			ended = &logs[i]
		}
	}
	if got := strings.Join(lifecycle, ", "); got != "Sandbox created, Sandbox paused, Sandbox resumed" {
		t.Errorf("lifecycle lines: %s", got)
	}
	if started == nil || ended == nil || started.Message != "Process with pid "+started.Fields["pid"]+" started" || ended.Fields["exit_code"] != "4" || ended.Time.Before(started.Time) {
		t.Fatalf("process lines: started %+v ended %+v in\n%+v", started, ended, logs)
	}
	for _, tt := range []struct {
		name string
		opts client.LogsOptions
		want func([]client.LogLine) bool
	}{
		{"search", client.LogsOptions{Search: "Sandbox paused"}, func(ls []client.LogLine) bool {
			return len(ls) == 1 && ls[0].Fields["kept"] == "memory"
		}},
		{"newest first", client.LogsOptions{Backward: true, Limit: 1}, func(ls []client.LogLine) bool {
			return len(ls) == 1 && !ls[0].Time.Before(logs[len(logs)-1].Time)
		}},
		{"from a cursor", client.LogsOptions{Cursor: ended.Time}, func(ls []client.LogLine) bool {
			return len(ls) > 0 && len(ls) < len(logs) && !ls[0].Time.Before(ended.Time)
		}},
		{"errors only", client.LogsOptions{Level: "error"}, func(ls []client.LogLine) bool {
			for _, l := range ls {
				if l.Level != "error" {
					return false
				}
			}
			return true
		}},
	} {
		got, err := d.Client.SandboxLogs(ctx, sb.ID, tt.opts)
		if err != nil || !tt.want(got) {
			t.Errorf("%s: %v %+v", tt.name, err, got)
		}
	}

	// The CLI.
	space := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, harness.Bin(t, "space"), args...)
		cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("space %v: %v\n%s", args, err, e.String())
		}
		return o.String()
	}
	out := space("metrics", sb.ID)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) < 3 || !strings.Contains(lines[0], "CPU") || !strings.Contains(out, "of 1") || !strings.Contains(out, "/ 256 MiB") {
		t.Errorf("space metrics:\n%s", out)
	}
	var cliM client.Metrics
	if err := json.Unmarshal([]byte(space("metrics", "--json", "--since", "1h", sb.ID)), &cliM); err != nil || len(cliM.Samples) < len(all.Samples) {
		t.Errorf("space metrics --json: %v, %d samples", err, len(cliM.Samples))
	}
	out = space("logs", sb.ID)
	if !strings.Contains(out, "INFO  spaced Sandbox created") || !strings.Contains(out, started.Message) || !strings.Contains(out, `exit_code="4"`) {
		t.Errorf("space logs:\n%s", out)
	}
	if out := space("logs", "-n", "1", "--search", "Sandbox created", sb.ID); strings.Count(out, "\n") != 1 || !strings.Contains(out, "Sandbox created") {
		t.Errorf("space logs -n 1 --search:\n%s", out)
	}

	// Both are kept after the end, with the end in the log.
	if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	logs, err = d.Client.SandboxLogs(ctx, sb.ID, client.LogsOptions{Backward: true, Limit: 1})
	if err != nil || len(logs) != 1 || logs[0].Message != "Sandbox killed" || logs[0].Fields["state"] != "killed" {
		t.Errorf("last line after kill: %v %+v", err, logs)
	}
	if after, err := d.Client.SandboxMetrics(ctx, sb.ID, client.MetricsOptions{}); err != nil || len(after.Samples) < len(all.Samples) {
		t.Errorf("metrics after kill: %v", err)
	}
}

// waitSamples waits for n samples of id taken after since.
func waitSamples(t *testing.T, d *harness.Daemon, id string, since time.Time, n int) []client.MetricSample {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := d.Client.SandboxMetrics(harness.Ctx(t, 10*time.Second), id, client.MetricsOptions{Start: since})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Samples) >= n {
			return m.Samples
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d samples since %v after 20 s, want %d", len(m.Samples), since, n)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestTelemetryBadInput: an unknown sandbox is 404, and the Go client
// passes a wrong parameter's 400 on. Which parameters are wrong, and what
// the 400 says, is checked without a daemon by internal/httpapi's
// TestBadInput.
func TestTelemetryBadInput(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID) })
	for _, p := range []string{"/metrics", "/logs"} {
		resp, body := do(t, d, "GET", "/v1/sandboxes/sb-nosuchsandbox0"+p, nil, nil)
		wantError(t, resp, body, 404, "not_found")
	}
	var apiErr *client.APIError
	_, err = d.Client.SandboxLogs(harness.Ctx(t, 10*time.Second), sb.ID, client.LogsOptions{Level: "loud"})
	if !errors.As(err, &apiErr) || apiErr.Status != 400 {
		t.Errorf("client with a bad level: %v", err)
	}
}
