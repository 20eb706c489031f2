package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

// Template figures: what a user pays to rebuild a template whose steps
// are all cached, to get a first answer from a template's server (its
// start command restored running), and to run code in the code
// interpreter. Every figure goes through the public API (and the E2B
// proxy for the sandbox's own ports), as a user's calls do.

// TemplateConfig of a run.
type TemplateConfig struct {
	// N is how many of each measurement.
	N int
	// Addr and APIKey are spaced's, for requests to sandbox ports through
	// its E2B proxy (the client package speaks only the native API).
	Addr, APIKey string
	// Interpreter names the code-interpreter template ("" skips it).
	Interpreter string
	// Runsc and RootFS, when set (root only), add the anchor of the
	// started template's create: raw runsc restores of a checkpoint of the
	// same server, alternating with the creates.
	Runsc, RootFS string
	Log           io.Writer
}

// TemplateFigures are milliseconds unless named otherwise.
type TemplateFigures struct {
	// A 10-step template (5 RUN, 2 COPY, ENV, WORKDIR, USER) rebuilt with
	// every step cached: request to ready.
	RebuildP50   float64 `json:"rebuild_p50"`
	RebuildP90   float64 `json:"rebuild_p90"`
	RebuildSteps int     `json:"rebuild_steps"`
	// Create of a template whose start command is an HTTP server, to the
	// first 200 from that server through the proxy; the create alone.
	HTTPFirstAnswerP50 float64 `json:"http_first_answer_p50"`
	HTTPFirstAnswerP90 float64 `json:"http_first_answer_p90"`
	HTTPCreateP50      float64 `json:"http_create_p50"`
	// The anchor: `runsc restore` of a raw checkpoint of the same server
	// (-1 when not measured), and HTTPFirstAnswerP50 over it.
	RawRestoreP50        float64 `json:"raw_restore_p50"`
	RestoreOverheadRatio float64 `json:"restore_overhead_ratio"`
	// The same with the template's warm pool (when the daemon has one:
	// SPACE_POOL=bench-http=...; -1 otherwise).
	HTTPPooledFirstAnswerP50 float64 `json:"http_pooled_first_answer_p50"`
	HTTPPooledFirstAnswerP90 float64 `json:"http_pooled_first_answer_p90"`
	// Code interpreter: create to the first run_code("1+1") result; a
	// run_code round trip on a warm context; a new context (a kernel
	// started on demand) to its first result. -1 when not measured.
	CodeFirstResultP50 float64 `json:"code_first_result_p50"`
	CodeFirstResultP90 float64 `json:"code_first_result_p90"`
	CodeRoundTripP50   float64 `json:"code_round_trip_p50"`
	CodeRoundTripP90   float64 `json:"code_round_trip_p90"`
	// The anchor of the round trip: the same request made inside the
	// sandbox to localhost:49999 (no proxy, no veth).
	CodeInSandboxRoundTripP50 float64 `json:"code_in_sandbox_round_trip_p50"`
	CodeNewContextP50         float64 `json:"code_new_context_p50"`
	CodePooled                bool    `json:"code_pooled"`
	N                         int     `json:"n"`
}

const benchHTTPTemplate = "bench-http"

// Templates measures the template figures.
func Templates(ctx context.Context, c *client.Client, cfg TemplateConfig) (*TemplateFigures, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "bench: "+format+"\n", args...) }
	f := &TemplateFigures{N: cfg.N, HTTPPooledFirstAnswerP50: -1, HTTPPooledFirstAnswerP90: -1, RawRestoreP50: -1, RestoreOverheadRatio: -1,
		CodeFirstResultP50: -1, CodeFirstResultP90: -1, CodeRoundTripP50: -1, CodeRoundTripP90: -1, CodeInSandboxRoundTripP50: -1, CodeNewContextP50: -1}
	p := &proxyClient{addr: cfg.Addr, http: &http.Client{Timeout: 30 * time.Second}}

	logf("building a 10-step template, then rebuilding it %d times (all cached)", cfg.N)
	rebuild, steps, err := rebuilds(ctx, c, cfg.N)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	f.RebuildP50, f.RebuildP90, f.RebuildSteps = rebuild.Percentile(50), rebuild.Percentile(90), steps

	logf("building %s (an HTTP server as its start command)", benchHTTPTemplate)
	if _, err := buildAndWait(ctx, c, client.BuildRequest{
		Name: benchHTTPTemplate, From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "mkdir -p /home/user/www && echo ok > /home/user/www/index.html"}},
		Start: &client.BuildStart{Cmd: "python3 -m http.server 8000 --directory /home/user/www", Ready: client.BuildReady{Port: 8000}},
	}); err != nil {
		return nil, err
	}
	var raw *rawRestore
	var restores Sample
	between := func() error { return nil }
	if cfg.Runsc != "" && cfg.RootFS != "" {
		if raw, err = newRawRestore(ctx, cfg.Runsc, cfg.RootFS); err != nil {
			return nil, fmt.Errorf("raw runsc restore: %w", err)
		}
		defer raw.close()
		between = func() error {
			d, err := raw.once(ctx)
			restores = append(restores, d)
			return err
		}
		logf("%d creates of %s to the server's first answer (no pool), each followed by a raw runsc restore", cfg.N, benchHTTPTemplate)
	} else {
		logf("%d creates of %s to the server's first answer (no pool)", cfg.N, benchHTTPTemplate)
	}
	first, creates, err := firstAnswers(ctx, c, p, cfg.N, false, between)
	if err != nil {
		return nil, err
	}
	f.HTTPFirstAnswerP50, f.HTTPFirstAnswerP90, f.HTTPCreateP50 = first.Percentile(50), first.Percentile(90), creates.Percentile(50)
	if len(restores) > 0 {
		f.RawRestoreP50 = restores.Percentile(50)
		f.RestoreOverheadRatio = float64(int(f.HTTPFirstAnswerP50/f.RawRestoreP50*100)) / 100
	}
	if poolOf(ctx, c, benchHTTPTemplate) >= 0 {
		logf("%d creates of %s from its warm pool", cfg.N, benchHTTPTemplate)
		pooled, _, err := firstAnswers(ctx, c, p, cfg.N, true, func() error { return nil })
		if err != nil {
			return nil, err
		}
		f.HTTPPooledFirstAnswerP50, f.HTTPPooledFirstAnswerP90 = pooled.Percentile(50), pooled.Percentile(90)
	}

	if cfg.Interpreter != "" {
		if _, err := c.GetTemplate(ctx, cfg.Interpreter); err != nil {
			logf("no template %s (scripts/build-code-interpreter.sh builds it): code figures skipped", cfg.Interpreter)
			return f, nil
		}
		f.CodePooled = poolOf(ctx, c, cfg.Interpreter) >= 0
		logf("%d creates of %s to the first run_code result (pooled: %v)", cfg.N, cfg.Interpreter, f.CodePooled)
		if err := codeFigures(ctx, c, p, cfg, f); err != nil {
			return nil, fmt.Errorf("code interpreter: %w", err)
		}
	}
	return f, nil
}

// rebuilds builds a 10-step template once, then n more times with every
// step cached, and times each of those from request to ready.
func rebuilds(ctx context.Context, c *client.Client, n int) (Sample, int, error) {
	dir, err := os.MkdirTemp("", "space-bench-ctx-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	for name, body := range map[string]string{"app/main.py": "print('bench')\n", "config.json": "{}\n"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, 0, err
		}
	}
	up, err := c.UploadContext(ctx, dir)
	if err != nil {
		return nil, 0, err
	}
	req := client.BuildRequest{Name: "bench-rebuild", Context: up.Hash, From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{
			{Run: "echo 1 > /home/user/1"}, {Run: "echo 2 > /home/user/2"},
			{Copy: &client.BuildCopy{Src: []string{"app/"}, Dest: "/home/user/app"}},
			{Env: map[string]string{"BENCH": "1"}},
			{Run: "echo 3 > /home/user/3"}, {Workdir: "/home/user/app"},
			{Copy: &client.BuildCopy{Src: []string{"config.json"}, Dest: "/home/user/config.json"}},
			{Run: "echo 4 > /home/user/4"}, {Run: "echo 5 > /home/user/5"}, {User: "user"},
		}}
	if _, err := buildAndWait(ctx, c, req); err != nil {
		return nil, 0, err
	}
	var s Sample
	for range n {
		start := time.Now()
		b, err := buildAndWait(ctx, c, req)
		if err != nil {
			return nil, 0, err
		}
		if b.Cached != b.Layered {
			return nil, 0, fmt.Errorf("a rebuild ran steps (%d of %d cached)", b.Cached, b.Layered)
		}
		s = append(s, time.Since(start))
	}
	return s, len(req.Steps), nil
}

// buildAndWait starts a build and polls it until it ends.
func buildAndWait(ctx context.Context, c *client.Client, req client.BuildRequest) (*client.Build, error) {
	b, err := c.StartBuild(ctx, req)
	if err != nil {
		return nil, err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if b.Done() {
			if b.State != client.BuildStateReady {
				return nil, fmt.Errorf("build of %s %s: %+v", req.Name, b.State, b.Error)
			}
			return b, nil
		}
		time.Sleep(delay)
		if b, err = c.GetBuild(ctx, b.ID); err != nil {
			return nil, err
		}
	}
}

// firstAnswers creates n sandboxes of the HTTP template and times each to
// the server's first 200 through the proxy (and the create alone).
func firstAnswers(ctx context.Context, c *client.Client, p *proxyClient, n int, pooled bool, between func() error) (Sample, Sample, error) {
	var first, creates Sample
	for range n {
		if pooled {
			waitPool(ctx, c, benchHTTPTemplate)
		}
		req := client.CreateSandboxRequest{Template: benchHTTPTemplate, TimeoutSeconds: 300}
		if !pooled {
			no := false
			req.Pool = &no
		}
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		created := time.Since(start)
		status, _, err := p.do(ctx, http.MethodGet, sb, 8000, "/index.html", nil)
		done := time.Since(start)
		c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
		if err != nil || status != http.StatusOK {
			return nil, nil, fmt.Errorf("first answer from %s: %d %v", sb.ID, status, err)
		}
		first, creates = append(first, done), append(creates, created)
		if err := between(); err != nil {
			return nil, nil, err
		}
	}
	return first, creates, nil
}

// codeFigures: create to first result, warm round trips, a kernel started
// on demand.
func codeFigures(ctx context.Context, c *client.Client, p *proxyClient, cfg TemplateConfig, f *TemplateFigures) error {
	var first, round, fresh Sample
	for i := range cfg.N {
		if f.CodePooled {
			waitPool(ctx, c, cfg.Interpreter)
		}
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: cfg.Interpreter, TimeoutSeconds: 300})
		if err != nil {
			return err
		}
		text, err := p.runCode(ctx, sb, "1+1", "")
		if err != nil || text != "2" {
			c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
			return fmt.Errorf("first run_code: %q %v", text, err)
		}
		first = append(first, time.Since(start))
		if i == 0 {
			if f.CodeInSandboxRoundTripP50, err = inSandboxRoundTrip(ctx, c, sb, 3*cfg.N); err != nil {
				return fmt.Errorf("round trip inside the sandbox: %w", err)
			}
			for j := range 3*cfg.N + 5 {
				t0 := time.Now()
				if _, err := p.runCode(ctx, sb, "1+1", ""); err != nil {
					return err
				}
				if j >= 5 {
					round = append(round, time.Since(t0))
				}
			}
			for range min(cfg.N, 5) {
				t0 := time.Now()
				_, body, err := p.do(ctx, http.MethodPost, sb, 49999, "/contexts", []byte(`{"language":"python"}`))
				if err != nil {
					return err
				}
				var ctxJSON struct{ ID string }
				json.Unmarshal(body, &ctxJSON)
				if _, err := p.runCode(ctx, sb, "1+1", ctxJSON.ID); err != nil {
					return err
				}
				fresh = append(fresh, time.Since(t0))
				p.do(ctx, http.MethodDelete, sb, 49999, "/contexts/"+ctxJSON.ID, nil)
			}
		}
		c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	}
	f.CodeFirstResultP50, f.CodeFirstResultP90 = first.Percentile(50), first.Percentile(90)
	f.CodeRoundTripP50, f.CodeRoundTripP90 = round.Percentile(50), round.Percentile(90)
	f.CodeNewContextP50 = fresh.Percentile(50)
	return nil
}

// inSandboxScript times n run_code("1+1") round trips to the interpreter
// from inside its sandbox, after 5 not counted, and prints the median in
// milliseconds.
const inSandboxScript = `import http.client, json, os, statistics, sys, time
n = int(sys.argv[1])
c = http.client.HTTPConnection("127.0.0.1", 49999)
h = {"X-Access-Token": os.environ["TOKEN"], "Content-Type": "application/json"}
xs = []
for i in range(n + 5):
    t = time.perf_counter()
    c.request("POST", "/execute", body=json.dumps({"code": "1+1"}), headers=h)
    r = c.getresponse()
    body = r.read()
    if r.status != 200 or b'"text":"2"' not in body:
        sys.exit("execute: %d %r" % (r.status, body))
    if i >= 5:
        xs.append((time.perf_counter() - t) * 1000)
print("%.3f" % statistics.median(xs))`

// inSandboxRoundTrip is the round trip's anchor: the same request from
// inside the sandbox, over its loopback.
func inSandboxRoundTrip(ctx context.Context, c *client.Client, sb *client.Sandbox, n int) (float64, error) {
	s, err := c.RunCommand(ctx, sb.ID, client.CommandRequest{
		Argv: []string{"python3", "-c", inSandboxScript, strconv.Itoa(n)}, Env: map[string]string{"TOKEN": sb.AccessToken},
	})
	if err != nil {
		return -1, err
	}
	defer s.Close()
	var out, errOut strings.Builder
	code := -1
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return -1, err
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventStderr:
			errOut.Write(ev.Data)
		case client.EventEnd:
			code = ev.Exit.Code()
		}
	}
	if code != 0 {
		return -1, fmt.Errorf("exit %d: %s", code, errOut.String())
	}
	return strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
}

// poolOf reads space_pool_ready for template (-1: no pool).
func poolOf(ctx context.Context, c *client.Client, template string) int {
	v, err := metricSample(ctx, c, `space_pool_ready{template="`+template+`"}`)
	if err != nil {
		return -1
	}
	return int(v)
}

// waitPool waits (at most 30 s) for template's pool to have one ready.
func waitPool(ctx context.Context, c *client.Client, template string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && poolOf(ctx, c, template) < 1; {
		time.Sleep(20 * time.Millisecond)
	}
}

// proxyClient reaches a port inside a sandbox through spaced's E2B proxy,
// with the sandbox's access token.
type proxyClient struct {
	addr string
	http *http.Client
}

func (p *proxyClient) do(ctx context.Context, method string, sb *client.Sandbox, port int, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+p.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
	req.Header.Set("X-Access-Token", sb.AccessToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// runCode runs code in the code interpreter (context "" is the default)
// and returns its main result's text.
func (p *proxyClient) runCode(ctx context.Context, sb *client.Sandbox, code, context string) (string, error) {
	body, _ := json.Marshal(map[string]any{"code": code, "context_id": nilIfEmpty(context)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/execute", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", sb.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("execute: %d %s", resp.StatusCode, data)
	}
	text := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Type         string `json:"type"`
			Text         string `json:"text"`
			IsMainResult bool   `json:"is_main_result"`
			Name, Value  string
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Type {
		case "result":
			if line.IsMainResult {
				text = line.Text
			}
		case "error":
			return "", fmt.Errorf("%s: %s", line.Name, line.Value)
		case "end_of_execution":
			return text, nil
		}
	}
	return "", fmt.Errorf("execute: the stream ended early: %v", sc.Err())
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
