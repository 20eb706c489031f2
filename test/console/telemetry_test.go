package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/client"
)

// TestSandboxTelemetry opens the metrics and log of a sandbox spinning a
// busy loop: the CPU chart has points and a busy one (read from the chart's
// data, not its pixels), memory and disk have points, the log has the
// "Sandbox created" line, nothing broke the page's CSP, and the list shows
// the sandbox's CPU and memory in use beside its limits. The samples are
// pushed (GET /v1/events?metrics=true): the list never asks for a
// sandbox's metrics, and the open chart gains points with no request
// after its first. The log is followed (logs?follow=true): a command
// started while it is open shows up.
func TestSandboxTelemetry(t *testing.T) {
	d := need(t)
	ctx := browser(t)
	c := d.Client
	sb, err := c.CreateSandbox(context.Background(), client.CreateSandboxRequest{CPU: 1, MemoryMB: 256, TimeoutSeconds: 600, Metadata: map[string]string{"owner": "telemetry"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.KillSandbox(context.Background(), sb.ID) })
	if _, err := c.StartBackground(context.Background(), sb.ID, client.CommandRequest{Cmd: "while :; do :; done", TimeoutSeconds: 300}); err != nil {
		t.Fatal(err)
	}

	urls := requests(ctx)
	metricsAsked := func() (n int) {
		for _, u := range urls() {
			if strings.Contains(u, "/v1/sandboxes/"+sb.ID+"/metrics") {
				n++
			}
		}
		return n
	}
	signIn(t, ctx, d, d.APIKey)
	waitFor(t, ctx, "the live list", `document.querySelector("[data-testid=live]") && document.querySelector("[data-testid=live]").innerText == "live"`, 15*time.Second)
	// Record CSP violations from here on; the hash routes below keep this
	// page.
	eval[bool](t, ctx, `window.cspViolations = []; document.addEventListener("securitypolicyviolation", e => cspViolations.push(e.violatedDirective + " " + e.blockedURI)); true`)

	// The list: CPU and memory in use beside the limits.
	row := fmt.Sprintf(`tr[data-id="%s"]`, sb.ID)
	waitFor(t, ctx, "the busy sandbox's usage in the list",
		`(() => { const u = document.querySelector('`+row+` [data-testid=cpu-usage]'); const m = document.querySelector('`+row+` [data-testid=mem-usage]');
		  return u && Number(u.dataset.pct) >= 25 && m && Number(m.dataset.bytes) > 0 && /of 1 vCPU$/.test(u.innerText) && /of 256 MiB$/.test(m.innerText) })()`, 60*time.Second)
	// And it follows the samples as they come.
	first := eval[string](t, ctx, `document.querySelector('`+row+` [data-testid=cpu-usage]').title`)
	waitFor(t, ctx, "a newer sample in the list", `document.querySelector('`+row+` [data-testid=cpu-usage]').title != `+strconv.Quote(first), 30*time.Second)
	if n := metricsAsked(); n != 0 {
		t.Errorf("the list asked for the sandbox's metrics %d times; its samples should come over /v1/events", n)
	}

	do(t, ctx, "open the metrics", chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+sb.ID+"/metrics"))
	chart := func(name string) string {
		return `document.querySelector("[data-testid=chart-` + name + `]")`
	}
	waitFor(t, ctx, "a CPU chart with the busy loop in it",
		chart("cpu")+` && `+chart("cpu")+`.querySelector("canvas") && Number(`+chart("cpu")+`.dataset.points) >= 3 && Number(`+chart("cpu")+`.dataset.max) >= 25`, 90*time.Second)
	for _, name := range []string{"memory", "disk"} {
		waitFor(t, ctx, "the "+name+" chart", chart(name)+` && `+chart(name)+`.querySelector("canvas") && Number(`+chart(name)+`.dataset.points) >= 3 && Number(`+chart(name)+`.dataset.last) > 0`, 30*time.Second)
	}
	// The chart keeps up: more points arrive while the page is open.
	points := eval[int](t, ctx, `Number(`+chart("cpu")+`.dataset.points)`)
	asked := metricsAsked()
	waitFor(t, ctx, "new samples on the open page", fmt.Sprintf(`Number(%s.dataset.points) > %d`, chart("cpu"), points), 30*time.Second)
	if asked != 1 || metricsAsked() != asked {
		t.Errorf("the metrics page asked for the series %d times before the new samples and %d after; want once (the past), then none", asked, metricsAsked())
	}
	logHas := func(text string) string {
		return `[...document.querySelectorAll("[data-testid=sandbox-log] tbody tr")].some(r => r.innerText.includes(` + strconv.Quote(text) + `) && r.dataset.level == "info")`
	}
	waitFor(t, ctx, "the created line in the log", logHas("Sandbox created"), 30*time.Second)
	// The log follows: a command started now shows up without a reload,
	// and the page never asked for the log but to follow it.
	cmd, err := c.StartBackground(context.Background(), sb.ID, client.CommandRequest{Cmd: "sleep 1"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the new command's line in the log", logHas(fmt.Sprintf("Process with pid %d started", cmd.PID)), 30*time.Second)
	for _, u := range urls() {
		if strings.Contains(u, "/v1/sandboxes/"+sb.ID+"/logs") && !strings.Contains(u, "follow=true") {
			t.Errorf("the page asked for the log instead of following it: %s", u)
		}
	}
	screenshot(t, ctx, "metrics")

	if v := eval[[]string](t, ctx, `cspViolations`); len(v) > 0 {
		t.Errorf("the page broke its Content-Security-Policy: %v", v)
	}
}
