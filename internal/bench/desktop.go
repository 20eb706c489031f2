package bench

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

//go:embed e2b_desktop.py
var e2bDesktopScript string

// DesktopTemplate is the template the desktop figures use, the one the
// E2B Desktop SDKs create.
const DesktopTemplate = "desktop"

// DesktopConfig sizes the desktop figures (issue 23's Speed section).
type DesktopConfig struct {
	// N is how many creates and pause+resume cycles; Calls how many
	// screenshots and clicks of each kind.
	N, Calls int
	// Python, when set, has the e2b_desktop package (test/desktop's
	// install-sdks.sh makes such a venv): the SDK's figures are measured
	// beside the native ones. Addr and APIKey are given to it as
	// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
	Python, Addr, APIKey string
	// Runsc and TemplatesDir (the daemon's templates directory on this
	// host), when set, add the raw runsc checkpoint/restore anchor of the
	// desktop template's own image (root only).
	Runsc, TemplatesDir string
	Log                 io.Writer
}

// DesktopFigures are the desktop's figures, milliseconds unless named
// otherwise, each beside its anchor measured in the same run.
type DesktopFigures struct {
	N     int `json:"n"`
	Calls int `json:"calls"`
	// Pooled says whether the daemon has a warm pool of the desktop
	// template (each create then waits for a ready one first).
	Pooled bool `json:"pooled"`
	// CreateToScreenshot is a create of the template until the native
	// screenshot's PNG has arrived; Create the create alone.
	CreateP50             float64 `json:"create_p50"`
	CreateToScreenshotP50 float64 `json:"create_to_screenshot_p50"`
	CreateToScreenshotP90 float64 `json:"create_to_screenshot_p90"`
	// The anchor: the E2B Desktop SDK's Sandbox.create() (which starts
	// Xvfb and Xfce itself) and its screenshot().
	SDKCreateToScreenshotP50 float64 `json:"sdk_create_to_screenshot_p50,omitempty"`
	SDKCreateToScreenshotP90 float64 `json:"sdk_create_to_screenshot_p90,omitempty"`
	// The native API on one idle desktop at 1024x768, sequential calls
	// agentPause apart.
	ScreenshotP50 float64 `json:"screenshot_p50"`
	ScreenshotP90 float64 `json:"screenshot_p90"`
	ClickP50      float64 `json:"click_p50"`
	ClickP90      float64 `json:"click_p90"`
	// ClickBackToBack: the same clicks with no pause between them (see
	// agentPause): each waits for what the one before made the desktop
	// draw.
	ClickBackToBackP50     float64 `json:"click_back_to_back_p50"`
	ClickBackToBackP90     float64 `json:"click_back_to_back_p90"`
	ClickWithScreenshotP50 float64 `json:"click_with_screenshot_p50"`
	ClickWithScreenshotP90 float64 `json:"click_with_screenshot_p90"`
	CommandScreenshotP50   float64 `json:"command_screenshot_p50"`
	CommandScreenshotP90   float64 `json:"command_screenshot_p90"`
	CommandClickP50        float64 `json:"command_click_p50"`
	CommandClickP90        float64 `json:"command_click_p90"`
	SDKScreenshotP50       float64 `json:"sdk_screenshot_p50,omitempty"`
	SDKScreenshotP90       float64 `json:"sdk_screenshot_p90,omitempty"`
	SDKClickP50            float64 `json:"sdk_click_p50,omitempty"`
	SDKClickP90            float64 `json:"sdk_click_p90,omitempty"`
	// A viewer's connection (the native GET .../desktop/vnc, as the
	// console's view makes it) until x11vnc's RFB version has arrived:
	// the first, which starts x11vnc, and the ones after it.
	VNCFirstMs            float64 `json:"vnc_first_ms"`
	VNCHandshakeP50       float64 `json:"vnc_handshake_p50"`
	VNCHandshakeP90       float64 `json:"vnc_handshake_p90"`
	IdleMiB               float64 `json:"idle_mib"`
	ChromiumMiB           float64 `json:"chromium_mib"`
	PauseP50              float64 `json:"pause_p50"`
	ResumeP50             float64 `json:"resume_p50"`
	ResumeToScreenshotP50 float64 `json:"resume_to_screenshot_p50"`
	CheckpointMiB         float64 `json:"checkpoint_mib"`
	RawCheckpointP50      float64 `json:"raw_checkpoint_p50,omitempty"`
	RawRestoreP50         float64 `json:"raw_restore_p50,omitempty"`
	RawRestoreToExecP50   float64 `json:"raw_restore_to_exec_p50,omitempty"`
	LoadStart             float64 `json:"load_start"`
	LoadEnd               float64 `json:"load_end"`
}

// benchPage is what Chromium shows in the memory and pause figures.
const benchPage = `<!doctype html><title>space-bench-page</title>
<body style="margin:0;background:#2e8b57;color:#fff;font:48px sans-serif">
<p style="padding:40px">space bench --desktop</p></body>`

// Desktop measures the desktop figures against the daemon behind c.
func Desktop(ctx context.Context, c *client.Client, cfg DesktopConfig) (*DesktopFigures, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "bench: desktop: "+format+"\n", args...) }
	f := &DesktopFigures{N: cfg.N, Calls: cfg.Calls, LoadStart: loadAverage()}
	f.Pooled = poolOf(ctx, c, DesktopTemplate) >= 0

	logf("%d creates to the first native screenshot (pooled: %v)", cfg.N, f.Pooled)
	var creates, firsts Sample
	for i := range cfg.N + 1 {
		if f.Pooled {
			waitPool(ctx, c, DesktopTemplate)
		}
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: DesktopTemplate, TimeoutSeconds: 300})
		if err != nil {
			return nil, err
		}
		created := time.Since(start)
		_, err = c.DesktopScreenshot(ctx, sb.ID, 0)
		first := time.Since(start)
		c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
		if err != nil {
			return nil, fmt.Errorf("first screenshot: %w", err)
		}
		if i > 0 { // the first warms the page cache
			creates, firsts = append(creates, created), append(firsts, first)
		}
	}
	f.CreateP50 = creates.Percentile(50)
	f.CreateToScreenshotP50, f.CreateToScreenshotP90 = firsts.Percentile(50), firsts.Percentile(90)

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: DesktopTemplate, TimeoutSeconds: 3600})
	if err != nil {
		return nil, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	if f.Pooled {
		// The create took the pool's desktop and the pool restores
		// another: the calls are measured after that, not beside it.
		waitPool(ctx, c, DesktopTemplate)
		time.Sleep(2 * time.Second)
	}
	if err := desktopCalls(ctx, c, sb.ID, cfg.Calls, f, logf); err != nil {
		return nil, err
	}
	if cfg.Python != "" {
		logf("the E2B Desktop SDK: %d creates to the first screenshot, %d screenshots and clicks", cfg.N, cfg.Calls)
		sdk, err := runDesktopSDK(ctx, cfg)
		if err != nil {
			return nil, err
		}
		f.SDKCreateToScreenshotP50, f.SDKCreateToScreenshotP90 = sdk["create_to_screenshot"].Percentile(50), sdk["create_to_screenshot"].Percentile(90)
		f.SDKScreenshotP50, f.SDKScreenshotP90 = sdk["screenshot"].Percentile(50), sdk["screenshot"].Percentile(90)
		f.SDKClickP50, f.SDKClickP90 = sdk["click"].Percentile(50), sdk["click"].Percentile(90)
	}

	logf("memory of the idle desktop, then with Chromium open on a page")
	if f.IdleMiB, err = settledMemory(ctx, c, sb.ID); err != nil {
		return nil, err
	}
	if err := openChromium(ctx, c, sb.ID); err != nil {
		return nil, err
	}
	if f.ChromiumMiB, err = settledMemory(ctx, c, sb.ID); err != nil {
		return nil, err
	}

	logf("%d pause+resume cycles of the desktop with Chromium", cfg.N)
	var pause, resume, toShot Sample
	for range cfg.N {
		start := time.Now()
		p, err := c.PauseSandbox(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		pause = append(pause, time.Since(start))
		if p.Checkpoint != nil {
			f.CheckpointMiB = float64(p.Checkpoint.Bytes*100>>20) / 100
		}
		time.Sleep(resumeAfter)
		start = time.Now()
		if _, err := c.ResumeSandbox(ctx, sb.ID, 3600); err != nil {
			return nil, err
		}
		resume = append(resume, time.Since(start))
		if _, err := c.DesktopScreenshot(ctx, sb.ID, 0); err != nil {
			return nil, fmt.Errorf("screenshot after resume: %w", err)
		}
		toShot = append(toShot, time.Since(start))
	}
	f.PauseP50, f.ResumeP50, f.ResumeToScreenshotP50 = pause.Percentile(50), resume.Percentile(50), toShot.Percentile(50)

	if cfg.Runsc != "" && cfg.TemplatesDir != "" {
		// The anchor: the same desktop with Chromium on the same page,
		// run from the template's image by runsc alone, checkpointed
		// and restored by runsc alone.
		root, err := desktopImageRoot(ctx, c, cfg.TemplatesDir)
		if err != nil {
			return nil, fmt.Errorf("raw runsc anchor: %w", err)
		}
		logf("%d raw runsc checkpoints and restores of the desktop template's image with Chromium", cfg.N)
		raw, err := newRawDesktop(ctx, cfg.Runsc, root)
		if err != nil {
			return nil, fmt.Errorf("raw runsc anchor: %w", err)
		}
		defer raw.close()
		var ckpt, rst, rstExec Sample
		for range cfg.N {
			d, image, err := raw.checkpoint(ctx)
			if err != nil {
				return nil, err
			}
			restored, first, err := raw.restore(ctx, image)
			if err != nil {
				return nil, err
			}
			ckpt, rst, rstExec = append(ckpt, d), append(rst, restored), append(rstExec, first)
		}
		f.RawCheckpointP50, f.RawRestoreP50, f.RawRestoreToExecP50 = ckpt.Percentile(50), rst.Percentile(50), rstExec.Percentile(50)
	}
	f.LoadEnd = loadAverage()
	return f, nil
}

// desktopCalls times the native screenshot and click on sandbox id, and
// the same as the E2B Desktop SDK does them: commands through the agent
// (scrot to a file, then the file's download; a synced xdotool move, then
// its click).
// agentPause comes before each timed call on the desktop: an agent's
// actions come a model's turn apart, so the desktop has drawn its answer
// to one action (xfdesktop redraws after a click's release) before the
// next arrives, and a call measured right after another would pay for
// that drawing too. ClickBackToBack keeps that figure.
const agentPause = 100 * time.Millisecond

func desktopCalls(ctx context.Context, c *client.Client, id string, n int, f *DesktopFigures, logf func(string, ...any)) error {
	measure := func(name string, pause time.Duration, p50, p90 *float64, call func(i int) error) error {
		logf("%d %s", n, name)
		var s Sample
		for i := range n + 2 {
			time.Sleep(pause)
			start := time.Now()
			if err := call(i); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if i >= 2 {
				s = append(s, time.Since(start))
			}
		}
		*p50, *p90 = s.Percentile(50), s.Percentile(90)
		return nil
	}
	// The pointer goes back and forth: xdotool's --sync waits for it to
	// move, forever if it is already there.
	at := func(i int) []int { return []int{900 + i%2, 700} }
	click := func(i int) error {
		_, err := c.DesktopAct(ctx, id, client.DesktopAction{Action: "left_click", Coordinate: at(i)})
		return err
	}
	for _, m := range []struct {
		name     string
		pause    time.Duration
		p50, p90 *float64
		call     func(i int) error
	}{
		{"native screenshots", agentPause, &f.ScreenshotP50, &f.ScreenshotP90, func(int) error {
			_, err := c.DesktopScreenshot(ctx, id, 0)
			return err
		}},
		{"native clicks", agentPause, &f.ClickP50, &f.ClickP90, click},
		{"native clicks back to back", 0, &f.ClickBackToBackP50, &f.ClickBackToBackP90, click},
		{"native clicks with a screenshot", agentPause, &f.ClickWithScreenshotP50, &f.ClickWithScreenshotP90, func(i int) error {
			_, err := c.DesktopAct(ctx, id, client.DesktopAction{Action: "left_click", Coordinate: at(i), Screenshot: true})
			return err
		}},
		{"screenshots by command (scrot, download)", agentPause, &f.CommandScreenshotP50, &f.CommandScreenshotP90, func(int) error {
			if err := desktopCommand(ctx, c, id, "scrot --pointer -o /tmp/space-bench.png"); err != nil {
				return err
			}
			r, err := c.Download(ctx, id, "/tmp/space-bench.png")
			if err != nil {
				return err
			}
			defer r.Close()
			_, err = io.Copy(io.Discard, r)
			return err
		}},
		{"clicks by command (xdotool)", agentPause, &f.CommandClickP50, &f.CommandClickP90, func(i int) error {
			p := at(i)
			return desktopCommand(ctx, c, id, fmt.Sprintf("xdotool mousemove --sync %d %d && xdotool click 1", p[0], p[1]))
		}},
	} {
		if err := measure(m.name, m.pause, m.p50, m.p90, m.call); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := rfbVersion(ctx, c, id); err != nil {
		return fmt.Errorf("the first viewer: %w", err)
	}
	f.VNCFirstMs = float64(time.Since(start).Microseconds()) / 1000
	// A fifth of a second between viewers: x11vnc takes a while to see a
	// viewer go, and one arriving at once waits for that.
	logf("%d viewer connections to the RFB version", n)
	var s Sample
	for range n {
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		if err := rfbVersion(ctx, c, id); err != nil {
			return fmt.Errorf("a viewer: %w", err)
		}
		s = append(s, time.Since(start))
	}
	f.VNCHandshakeP50, f.VNCHandshakeP90 = s.Percentile(50), s.Percentile(90)
	return nil
}

// rfbVersion connects to sandbox id's screen as a viewer and reads the
// VNC server's version line.
func rfbVersion(ctx context.Context, c *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := c.DesktopVNC(ctx, id)
	if err != nil {
		return err
	}
	defer conn.Close()
	var v [12]byte
	if _, err := io.ReadFull(conn, v[:]); err != nil {
		return fmt.Errorf("the RFB version: %w", err)
	}
	if !strings.HasPrefix(string(v[:]), "RFB 003.") {
		return fmt.Errorf("not an RFB version: %q", v[:])
	}
	return nil
}

// desktopCommand runs cmd as the desktop's user on its display, to its end.
func desktopCommand(ctx context.Context, c *client.Client, id, cmd string) error {
	st, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: cmd, User: "user", Env: map[string]string{"DISPLAY": ":0"}})
	if err != nil {
		return err
	}
	defer st.Close()
	var stderr bytes.Buffer
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%q: the stream ended without an exit", cmd)
		}
		if err != nil {
			return err
		}
		switch ev.Type {
		case client.EventStderr:
			stderr.Write(ev.Data)
		case client.EventEnd:
			if code := ev.Exit.Code(); code != 0 {
				return fmt.Errorf("%q exited %d: %s", cmd, code, strings.TrimSpace(stderr.String()))
			}
			return nil
		}
	}
}

// chromiumCommand opens Chromium on the bench's page (written to
// /tmp/space-bench-page.html first) on display :0.
const chromiumCommand = "exec chromium --no-first-run --no-default-browser-check --new-window --window-position=60,80 --window-size=860,560 file:///tmp/space-bench-page.html"

// openChromium shows benchPage in Chromium and waits for its window.
func openChromium(ctx context.Context, c *client.Client, id string) error {
	if _, err := c.Upload(ctx, id, "/tmp/space-bench-page.html", strings.NewReader(benchPage)); err != nil {
		return err
	}
	if _, err := c.StartBackground(ctx, id, client.CommandRequest{User: "user", Env: map[string]string{"DISPLAY": ":0"}, Cmd: chromiumCommand}); err != nil {
		return fmt.Errorf("start Chromium: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for desktopCommand(ctx, c, id, "wmctrl -l | grep -q space-bench-page") != nil {
		if time.Now().After(deadline) {
			return errors.New("Chromium's window with the page did not show within 2 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

// memorySettle is how long a desktop is left alone before its memory is
// read, and how many of spaced's samples of it are read then.
const (
	memorySettle  = 10 * time.Second
	memorySamples = 3
)

// settledMemory is sandbox id's host memory (spaced's sampling of its
// cgroup: what it is charged, less the host's file cache) in MiB, the
// median of its last samples after it was left alone for memorySettle.
func settledMemory(ctx context.Context, c *client.Client, id string) (float64, error) {
	time.Sleep(memorySettle)
	m, err := c.SandboxMetrics(ctx, id, client.MetricsOptions{Start: time.Now().Add(-memorySettle / 2)})
	if err != nil {
		return 0, err
	}
	if len(m.Samples) == 0 {
		return 0, fmt.Errorf("spaced has no memory samples of sandbox %s", id)
	}
	var used []int64
	for _, x := range m.Samples[max(0, len(m.Samples)-memorySamples):] {
		used = append(used, x.MemUsed)
	}
	slices.Sort(used)
	return float64(used[len(used)/2]*10>>20) / 10, nil
}

// runDesktopSDK runs the embedded E2B Desktop SDK script and returns its
// samples by name.
func runDesktopSDK(ctx context.Context, cfg DesktopConfig) (map[string]Sample, error) {
	script, err := os.CreateTemp("", "space-bench-e2b-desktop-*.py")
	if err != nil {
		return nil, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(e2bDesktopScript); err != nil {
		return nil, err
	}
	script.Close()
	addr := cfg.Addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	cmd := exec.CommandContext(ctx, cfg.Python, script.Name(), strconv.Itoa(cfg.N), strconv.Itoa(cfg.Calls))
	cmd.Env = append(os.Environ(), "E2B_API_URL="+addr, "E2B_SANDBOX_URL="+addr, "E2B_API_KEY="+cfg.APIKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("E2B Desktop SDK script: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseSamples(out)
}
