package console

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// signIn opens the console and signs in with key through the form.
func signIn(t *testing.T, ctx context.Context, d *harness.Daemon, key string) {
	t.Helper()
	do(t, ctx, "open the console",
		chromedp.Navigate("http://"+d.Addr+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=key]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=key]`), key),
		chromedp.Click(chromedp.CSS(`[data-testid=signin]`)),
	)
}

// requests records every URL the browser asks for, to show the API key is
// never in one.
func requests(ctx context.Context) func() []string {
	var mu sync.Mutex
	var urls []string
	events := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			urls = append(urls, ev.Request.URL)
			mu.Unlock()
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), urls...)
	}
}

func TestWrongKeyRefused(t *testing.T) {
	d := need(t)
	ctx := browser(t)
	signIn(t, ctx, d, "space_not_the_key_"+harness.RandHex(8))
	waitFor(t, ctx, "the refusal", `document.querySelector("[data-testid=signin-error]")`, 10*time.Second)
	msg := eval[string](t, ctx, `document.querySelector("[data-testid=signin-error]").innerText`)
	if !strings.Contains(msg, "invalid API key") {
		t.Errorf("refusal says %q", msg)
	}
	screenshot(t, ctx, "signin-refused")
	// Still signed out: the session answers 401 and the API through the
	// console too.
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("api/v1/sandboxes").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusUnauthorized {
		t.Errorf("the console's API answered %d to a browser with a refused key, want 401", status)
	}
}

// TestCrossSitePostRefused signs a browser in, then has pages of two other
// origins send it a form POST that would create a sandbox: one of the same
// site (another port of 127.0.0.1: the session cookie goes along, the CSRF
// checks refuse it) and one of another site (localhost: SameSite=Strict
// keeps the cookie home). Neither creates anything.
func TestCrossSitePostRefused(t *testing.T) {
	d := need(t)
	target := "http://" + d.Addr + "/ui/api/v1/sandboxes"
	evil := http.NewServeMux()
	evil.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id=f method=POST action=%q enctype="text/plain"><input name='{"metadata":{"by":"evil"},"x":"' value='"}'></form><script>document.getElementById("f").submit()</script>`, target)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: evil}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	// The other site's pages are on the host too: the browser reaches them.
	ctx := browser(t, ln.Addr().String())
	signIn(t, ctx, d, d.APIKey)
	waitFor(t, ctx, "the sandbox list", `document.querySelector("[data-testid=sandbox-table]")`, 15*time.Second)
	before := countSandboxes(t, d)

	for _, tc := range []struct {
		name   string
		origin string
		status string // what the console answered, as the browser shows it
	}{
		{"same site, other origin", fmt.Sprintf("http://127.0.0.1:%d/", port), "request refused"},
		{"other site", fmt.Sprintf("http://localhost:%d/", port), "sign in to the console"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			do(t, ctx, "open the other page", chromedp.Navigate(tc.origin))
			waitFor(t, ctx, "the form's answer", `location.href.includes("/ui/api/v1/sandboxes")`, 10*time.Second)
			waitFor(t, ctx, "the answer's body", `document.body && document.body.innerText.includes("error")`, 10*time.Second)
			body := eval[string](t, ctx, `document.body.innerText`)
			if !strings.Contains(body, tc.status) {
				t.Errorf("the console answered %q, want %q", body, tc.status)
			}
		})
	}
	if after := countSandboxes(t, d); after != before {
		t.Fatalf("a cross-site POST created a sandbox: %d sandboxes, were %d", after, before)
	}
	if !strings.Contains(logOf(t, d), "console refused a request") {
		t.Errorf("spaced did not log the refusal")
	}
}

// TestConsole walks the console as a person would: sign in, create a
// sandbox from the form and another through the API (both appear without a
// reload), the terminal (echo hi; a resize reaches the PTY), upload a file,
// the other pages, kill. The key is never in a URL or spaced's log.
func TestConsole(t *testing.T) {
	d := need(t)
	ctx := browser(t)
	urls := requests(ctx)
	c := d.Client
	killAtEnd(t, d)

	signIn(t, ctx, d, d.APIKey)
	waitFor(t, ctx, "the live list", `document.querySelector("[data-testid=live]") && document.querySelector("[data-testid=live]").innerText == "live"`, 15*time.Second)
	// A mark that a reload would wipe: everything below happens in this
	// one page.
	eval[bool](t, ctx, `window.spaceMark = true`)

	// Create from the form.
	do(t, ctx, "fill the create form",
		chromedp.Click(chromedp.CSS(`[data-testid=new-sandbox]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=create-form]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=create-metadata]`), "owner=console-test"),
	)
	screenshot(t, ctx, "create")
	do(t, ctx, "create", chromedp.Click(chromedp.CSS(`[data-testid=create-submit]`)))
	waitFor(t, ctx, "the new sandbox in the list", `[...document.querySelectorAll("tr[data-state=running]")].some(r => r.innerText.includes("owner=console-test"))`, 30*time.Second)
	id := eval[string](t, ctx, `[...document.querySelectorAll("tr[data-state=running]")].find(r => r.innerText.includes("owner=console-test")).dataset.id`)
	if sb, err := c.GetSandbox(context.Background(), id); err != nil || sb.Metadata["owner"] != "console-test" {
		t.Fatalf("the API does not know the console's sandbox %s: %v %+v", id, err, sb)
	}

	// One made elsewhere appears too: the list follows the events.
	other, err := c.CreateSandbox(context.Background(), client.CreateSandboxRequest{Metadata: map[string]string{"owner": "api"}, Network: &client.Network{Internet: true}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a sandbox created through the API", fmt.Sprintf(`document.querySelector('tr[data-id="%s"][data-state=running]')`, other.ID), 15*time.Second)
	// Their memory in use beside the limit, from their latest samples.
	waitFor(t, ctx, "the sandboxes' usage", fmt.Sprintf(`document.querySelector('tr[data-id="%s"] [data-testid=mem-usage]') && document.querySelector('tr[data-id="%s"] [data-testid=mem-usage]')`, id, other.ID), 30*time.Second)
	screenshot(t, ctx, "sandboxes")

	// The terminal.
	do(t, ctx, "open the terminal",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+id+"/terminal"),
	)
	waitFor(t, ctx, "the terminal to connect", `document.querySelector("[data-testid=terminal-status]") && document.querySelector("[data-testid=terminal-status]").innerText == "connected"`, 15*time.Second)
	typeInTerminal(t, ctx, "echo hi")
	waitFor(t, ctx, "hi from the shell", `/(^|\n)hi\s*(\n|$)/.test(document.querySelector(".xterm-rows").innerText.replace(/\u00a0/g, " "))`, 15*time.Second)
	screenshot(t, ctx, "terminal")
	wide := sttySize(t, ctx)
	do(t, ctx, "narrow the window", chromedp.EmulateViewport(900, 700))
	narrow := sttySize(t, ctx)
	if narrow[1] >= wide[1] || narrow[0] >= wide[0] {
		t.Errorf("the PTY did not follow the terminal: %dx%d in a wide window, %dx%d in a narrow one", wide[1], wide[0], narrow[1], narrow[0])
	}
	do(t, ctx, "widen the window", chromedp.EmulateViewport(1400, 900))

	// Upload a file and see it listed.
	file := filepath.Join(t.TempDir(), "console-upload.txt")
	if err := os.WriteFile(file, []byte("uploaded from the console\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "upload",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+id+"/files"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=files-table]`)),
		chromedp.SetUploadFiles(chromedp.CSS(`[data-testid=files-upload]`), []string{file}),
	)
	waitFor(t, ctx, "the upload in the list", `document.querySelector('tr[data-name="console-upload.txt"]')`, 15*time.Second)
	rc, err := c.Download(context.Background(), id, "/home/user/console-upload.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "uploaded from the console\n" {
		t.Errorf("the sandbox has %q", got)
	}
	screenshot(t, ctx, "files")

	// Commands and their output.
	do(t, ctx, "run a command",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+id+"/commands"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=command-input]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=command-input]`), "uname -s; echo 6*7=$((6*7))"),
		chromedp.Click(chromedp.CSS(`[data-testid=command-run]`)),
	)
	waitFor(t, ctx, "the command's output", `document.querySelector("[data-testid=command-output]").innerText.includes("6*7=42") && document.querySelector("[data-testid=command-end]")`, 15*time.Second)
	screenshot(t, ctx, "commands")

	// Pause and resume the other one from the list, and snapshot its disk
	// from its page.
	row := fmt.Sprintf(`tr[data-id="%s"]`, other.ID)
	do(t, ctx, "pause",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes"),
		chromedp.WaitVisible(chromedp.CSS(row+` [data-testid=pause]`)),
		chromedp.Click(chromedp.CSS(row+` [data-testid=pause]`)),
	)
	waitFor(t, ctx, "the sandbox paused", `document.querySelector('`+row+`[data-state=paused]')`, 60*time.Second)
	// The record says paused before the pause has torn the sandbox down
	// on the host, and a resume in between fails (its network namespace
	// is still there): resume once the pause has answered.
	waitLog(t, d, `msg="sandbox paused" sandbox=`+other.ID, 30*time.Second)
	do(t, ctx, "resume", chromedp.Click(chromedp.CSS(row+` [data-testid=resume]`)))
	waitFor(t, ctx, "the sandbox running again", `document.querySelector('`+row+`[data-state=running]')`, 60*time.Second)
	do(t, ctx, "snapshot",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+other.ID+"/snapshots"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=take-snapshot]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=take-snapshot]`)),
	)
	waitFor(t, ctx, "the snapshot listed", `document.querySelectorAll("[data-testid=snapshots] tbody tr").length == 1`, 60*time.Second)
	screenshot(t, ctx, "snapshots")

	do(t, ctx, "open the overview", chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+id))
	waitFor(t, ctx, "the overview", `document.body.innerText.includes("Network policy")`, 10*time.Second)
	screenshot(t, ctx, "sandbox")

	// A template build's log, live, then the template deleted from the page.
	build, err := c.StartBuild(context.Background(), client.BuildRequest{
		Name: "console-test", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "echo built-for-the-console; sleep 1; echo step-done", NoCache: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open the build's log",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/templates"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-build="%s"] a`, build.ID))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-build="%s"] a`, build.ID))),
	)
	waitFor(t, ctx, "the build's log", `document.querySelector("[data-testid=build-log]") && document.querySelector("[data-testid=build-log]").innerText.includes("step-done")`, 90*time.Second)
	waitFor(t, ctx, "the build's end", `document.querySelector("[data-testid=build-state]") && document.querySelector("[data-testid=build-state]").innerText == "ready"`, 90*time.Second)
	do(t, ctx, "refresh the templates", chromedp.Click(chromedp.CSS(`[data-testid=templates-refresh]`)))
	waitFor(t, ctx, "the new template", `document.querySelector('[data-template="console-test"]')`, 10*time.Second)
	screenshot(t, ctx, "templates")
	do(t, ctx, "delete the template",
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(`[data-template="console-test"] [data-testid=delete-template]`)),
	)
	waitFor(t, ctx, "the template gone", `!document.querySelector('[data-template="console-test"]')`, 10*time.Second)

	// An egress denial, a secret and a tenant with a key for the platform
	// page to list.
	deniedEgress(t, c, other.ID)
	putSecret(t, d, "console-demo", `{"value":"not-shown","host":"api.example.com","header":"Authorization"}`)
	acme := "acme-" + harness.RandHex(3)
	if _, err := c.CreateTenant(context.Background(), acme, "Acme agents", client.Quotas{Sandboxes: 20}); err != nil {
		t.Fatal(err)
	}
	acmeKey, err := c.IssueKey(context.Background(), acme, "ci")
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open the platform page", chromedp.Navigate("http://"+d.Addr+"/ui/#/platform"))
	// The commands and the terminal above are in the command start chart.
	waitFor(t, ctx, "the platform page", `document.querySelector("[data-testid=health]") && document.querySelector("[data-testid=pools]") && document.querySelector("[data-testid=chart-create] canvas") && document.querySelector("[data-testid=chart-exec] canvas")`, 10*time.Second)
	waitFor(t, ctx, "the denial and the secret", `document.querySelector("[data-testid=denials]") && document.querySelector("[data-testid=denials]").innerText.includes(`+strconv.Quote(other.ID)+`) &&
		document.querySelector("[data-testid=secrets]") && document.querySelector("[data-testid=secrets]").innerText.includes("console-demo")`, 15*time.Second)
	if eval[bool](t, ctx, `document.body.innerText.includes("not-shown")`) {
		t.Errorf("the platform page shows a secret's value")
	}
	// This node's admission budget, and the tenants with their keys' public
	// ids (never the keys).
	waitFor(t, ctx, "the admission budget and the tenants", `document.querySelector('[data-testid=admission] tr[data-resource=sandboxes]') &&
		document.querySelector('[data-testid=tenants] tr[data-tenant=`+acme+`] [data-key=`+acmeKey.ID+`]')`, 10*time.Second)
	if got := eval[string](t, ctx, `document.querySelector('[data-testid=admission] tr[data-resource=sandboxes]').innerText`); !regexp.MustCompile(`^Sandboxes\s+\d+\s+[\d.]+%\s+\d+`).MatchString(got) {
		t.Errorf("the sandboxes' budget row says %q; want the count in use, its share and the budget", got)
	}
	if !strings.HasPrefix(acmeKey.Key, acmeKey.ID) || eval[bool](t, ctx, `document.body.innerText.includes(`+strconv.Quote(acmeKey.Key)+`)`) {
		t.Errorf("the platform page shows the tenant's key %s, or its id %s is not its start", acmeKey.Key, acmeKey.ID)
	}
	if eval[bool](t, ctx, `!!document.querySelector("[data-testid=nodes]")`) {
		t.Errorf("a spaced alone shows a node list")
	}
	screenshotPage(t, ctx, "platform")

	// Kill from the sandbox page and see the state change there and in the
	// list.
	do(t, ctx, "kill",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes/"+id),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=kill]`)),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS(`[data-testid=kill]`)),
	)
	waitFor(t, ctx, "the state to become killed", `document.querySelector(".toolbar .state") && document.querySelector(".toolbar .state").innerText == "killed"`, 15*time.Second)
	do(t, ctx, "show killed sandboxes",
		chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=sandbox-table]`)),
		chromedp.Click(chromedp.CSS(`label:has([data-testid=filter-killed])`)),
	)
	waitFor(t, ctx, "the killed sandbox in the list", fmt.Sprintf(`document.querySelector('tr[data-id="%s"][data-state=killed]')`, id), 10*time.Second)
	if sb, err := c.GetSandbox(context.Background(), id); err != nil || sb.State != "killed" {
		t.Errorf("the API says %+v, %v; want killed", sb, err)
	}
	if !eval[bool](t, ctx, `window.spaceMark === true`) {
		t.Errorf("the page was reloaded")
	}

	for _, u := range urls() {
		if strings.Contains(u, d.APIKey) {
			t.Errorf("the API key was in a URL: %s", u)
		}
	}
	if strings.Contains(logOf(t, d), d.APIKey) {
		t.Errorf("the API key is in spaced's log")
	}
}

// typeInTerminal types text into xterm's input (its hidden textarea), then
// presses Enter: the text as one input event, Enter as a key a keyboard
// sends (keyDown with its text, keyUp).
func typeInTerminal(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	do(t, ctx, "focus the terminal", chromedp.Evaluate[chromedp.Void](`document.querySelector(".xterm-helper-textarea").focus()`))
	enter := input.DispatchKeyEventParams{Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
	down, up := enter, enter
	down.Type, down.Text = input.DispatchKeyEventTypeKeyDown, "\r"
	up.Type = input.DispatchKeyEventTypeKeyUp
	for _, step := range []func() error{
		func() error {
			_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: text})
			return err
		},
		func() error { _, err := chromedp.Call(ctx, input.DispatchKeyEvent, down); return err },
		func() error { _, err := chromedp.Call(ctx, input.DispatchKeyEvent, up); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("type %q in the terminal: %v", text, err)
		}
	}
}

var sttyAsked int

// sttySize asks the shell for its terminal's size, [rows, cols], once it
// has settled (the page sends a resize when the box changes size).
func sttySize(t *testing.T, ctx context.Context) [2]int {
	t.Helper()
	chromedp.Do(ctx, chromedp.Sleep(500*time.Millisecond))
	sttyAsked++
	mark := fmt.Sprintf("size%d=", sttyAsked)
	typeInTerminal(t, ctx, "clear; echo "+mark+"$(stty size | tr ' ' x)")
	waitFor(t, ctx, "stty's answer", `/`+mark+`\d+x\d+/.test(document.querySelector(".xterm-rows").innerText)`, 10*time.Second)
	m := regexp.MustCompile(mark + `(\d+)x(\d+)`).FindStringSubmatch(eval[string](t, ctx, `document.querySelector(".xterm-rows").innerText`))
	rows, _ := strconv.Atoi(m[1])
	cols, _ := strconv.Atoi(m[2])
	return [2]int{rows, cols}
}

func countSandboxes(t *testing.T, d *harness.Daemon) int {
	t.Helper()
	page, err := d.Client.ListSandboxes(context.Background(), client.ListOptions{States: []string{"creating", "running", "paused", "resuming", "killed", "lost"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Sandboxes)
}

// waitLog waits for spaced's log to hold line.
func waitLog(t *testing.T, d *harness.Daemon, line string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(logOf(t, d), line); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("spaced did not log %q within %s", line, timeout)
		}
	}
}

func logOf(t *testing.T, d *harness.Daemon) string {
	t.Helper()
	data, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// killAtEnd kills what the test left running on the shared daemon.
func killAtEnd(t *testing.T, d *harness.Daemon) {
	t.Cleanup(func() {
		page, err := d.Client.ListSandboxes(context.Background(), client.ListOptions{Limit: 1000})
		if err != nil {
			return
		}
		for _, sb := range page.Sandboxes {
			d.Client.KillSandbox(context.Background(), sb.ID)
		}
	})
}

// putSecret creates or rotates secret name with the admin key (body is
// PUT /v1/secrets/{name}'s).
func putSecret(t *testing.T, d *harness.Daemon, name, body string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", "http://"+d.Addr+"/v1/secrets/"+name, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("put secret %s: %s %s", name, resp.Status, msg)
	}
}
