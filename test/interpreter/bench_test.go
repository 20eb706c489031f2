package interpreter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/interpreter/interpretertest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// BenchmarkRoundTrip splits a warm run_code("1+1") round trip in a
// code-interpreter-v1 sandbox into its hops, each timed in the same
// iterations so that a loaded machine weighs on all alike:
//
//	proxy-execute   POST /execute through spaced's E2B proxy (what an SDK pays)
//	proxy-execute-plain  the same to a second space-interpreter in the sandbox,
//	                started with -plain-kernels (and no auth: the proxy sends
//	                a user port no token): the anchor of the per-cell costs
//	                the server drops
//	proxy-health    GET /health the same way: the proxy, veth, gVisor's netstack, HTTP
//	direct-execute  POST /execute from the host to the sandbox's address: no spaced
//	direct-health   GET /health the same way
//	in-execute      POST /execute inside the sandbox, on its loopback
//	in-health       GET /health inside the sandbox
//	in-jupyter      jupyter_client alone against the same kernel: no HTTP, no server
//	in-jupyter-plain  the same against a kernel started beside it with ipykernel's
//	                per-cell costs that the server drops left in (its anchor)
//
// Run: go test -run '^$' -bench RoundTrip -benchtime 200x ./test/interpreter/
// (as root; it builds the template first, 3-4 minutes).
func BenchmarkRoundTrip(b *testing.B) {
	testenv.NeedCommand(b, "python3", "npm")
	d := harness.Own(b, harness.Options{Name: "spaced", CIDR: "10.248.4.0/22", NoPool: true, BootTimeout: 10 * time.Second})
	here, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	runEnv(b, filepath.Join(here, "..", ".."), []string{
		"SPACE_ADDR=" + d.Addr, "SPACE_API_KEY=" + d.APIKey, "SPACE_CLI=" + harness.Bin(b, "space"),
		"SPACE_WHEELHOUSE=" + filepath.Join(interpretertest.CacheDir(), "wheels"),
	}, "scripts/build-code-interpreter.sh")
	sb := d.NewSandbox(b, client.CreateSandboxRequest{Template: "code-interpreter-v1", TimeoutSeconds: 900})
	ip := sandboxIP(b, d, sb.ID)
	if _, err := d.Client.StartBackground(harness.Ctx(b, time.Minute), sb.ID, client.CommandRequest{User: "root", Argv: []string{
		"/usr/local/bin/space-interpreter", "-addr", "0.0.0.0:49998", "-state", "", "-plain-kernels",
		"-runtime-dir", "/run/space-interpreter-plain", "-python", "/opt/space/interpreter/venv/bin/python", "-kernel-user", "user",
	}}); err != nil {
		b.Fatalf("start the plain interpreter: %v", err)
	}

	hc := &http.Client{Timeout: 30 * time.Second}
	proxiedTo := func(port, method, path string, body []byte) *http.Request {
		r, _ := http.NewRequest(method, "http://"+d.Addr+path, bytes.NewReader(body))
		r.Header.Set("E2b-Sandbox-Id", sb.ID)
		r.Header.Set("E2b-Sandbox-Port", port)
		r.Header.Set("X-Access-Token", sb.AccessToken)
		return r
	}
	proxied := func(method, path string, body []byte) *http.Request { return proxiedTo("49999", method, path, body) }
	direct := func(method, path string, body []byte) *http.Request {
		r, _ := http.NewRequest(method, "http://"+ip+":49999"+path, bytes.NewReader(body))
		r.Header.Set("X-Access-Token", sb.AccessToken)
		return r
	}
	cell := []byte(`{"code":"1+1"}`)
	hops := []struct {
		name string
		req  func() *http.Request
		want string
	}{
		{"proxy-execute", func() *http.Request { return proxied("POST", "/execute", cell) }, `"text":"2"`},
		{"proxy-execute-plain", func() *http.Request { return proxiedTo("49998", "POST", "/execute", cell) }, `"text":"2"`},
		{"proxy-health", func() *http.Request { return proxied("GET", "/health", nil) }, `"OK"`},
		{"direct-execute", func() *http.Request { return direct("POST", "/execute", cell) }, `"text":"2"`},
		{"direct-health", func() *http.Request { return direct("GET", "/health", nil) }, `"OK"`},
	}
	once := func(i int) time.Duration {
		start := time.Now()
		resp, err := hc.Do(hops[i].req())
		if err != nil {
			b.Fatalf("%s: %v", hops[i].name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), hops[i].want) {
			b.Fatalf("%s: %d %s", hops[i].name, resp.StatusCode, body)
		}
		return took
	}
	// The plain interpreter's default kernel takes a few seconds to start.
	if !harness.WaitFor(2*time.Minute, func() bool {
		resp, err := hc.Do(proxiedTo("49998", "GET", "/health", nil))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		b.Fatal("the plain interpreter did not come up")
	}
	for i := range hops {
		for range 5 {
			once(i) // connections made, code paths warm
		}
	}
	samples := make([][]time.Duration, len(hops))
	n := 0
	for b.Loop() {
		for i := range hops {
			samples[i] = append(samples[i], once(i))
		}
		n++
	}
	b.StopTimer()
	for i, h := range hops {
		b.ReportMetric(median(samples[i]), h.name+"-p50-ms")
	}
	for name, v := range inSandbox(b, d, sb, max(n, 20)) {
		b.ReportMetric(v, name+"-p50-ms")
	}
}

func median(s []time.Duration) float64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// sandboxIP is the sandbox's address on its veth, as the sandbox sees it.
func sandboxIP(tb testing.TB, d *harness.Daemon, id string) string {
	tb.Helper()
	r, err := d.Exec(harness.Ctx(tb, time.Minute), id, client.CommandRequest{Argv: []string{"python3", "-c",
		"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('192.0.2.1', 9)); print(s.getsockname()[0])"}})
	if err != nil || r.Exit.Code() != 0 {
		tb.Fatalf("sandbox address: %v %+v", err, r)
	}
	return strings.TrimSpace(r.Stdout)
}

// inSandboxScript times, interleaved, n round trips of /execute and
// /health on the sandbox's loopback and of jupyter_client alone against
// the default context's kernel, after 5 of each not counted; it prints
// the medians in milliseconds as JSON.
const inSandboxScript = `import glob, http.client, json, os, statistics, sys, time
from jupyter_client import BlockingKernelClient
n = int(sys.argv[1])
h = {"X-Access-Token": os.environ["TOKEN"], "Content-Type": "application/json"}
c = http.client.HTTPConnection("127.0.0.1", 49999)
def execute():
    c.request("POST", "/execute", body='{"code":"1+1"}', headers=h)
    b = c.getresponse().read()
    assert b'"text":"2"' in b, b
def health():
    c.request("GET", "/health")
    c.getresponse().read()
conn = min(glob.glob("/run/space-interpreter/kernels/*/connection.json"), key=os.path.getmtime)
kc = BlockingKernelClient()
kc.load_connection_file(conn)
kc.start_channels()
# The anchor: a kernel as the server starts one (its profile, its flags),
# but without what the server drops per cell (internal/interpreter's
# quick flushes).
from jupyter_client import KernelManager
km = KernelManager(kernel_name="python3")
km.start_kernel(extra_arguments=["--InteractiveShell.colors=NoColor", "--HistoryManager.hist_file=:memory:"],
    env=dict(os.environ, IPYTHONDIR="/run/space-interpreter/ipython"))
plain = km.client()
plain.start_channels()
plain.wait_for_ready(timeout=120)
def run(client):
    r = client.execute_interactive("1+1", timeout=30, output_hook=lambda m: None)
    assert r["content"]["status"] == "ok", r
hops = {"in-execute": execute, "in-health": health, "in-jupyter": lambda: run(kc), "in-jupyter-plain": lambda: run(plain)}
xs = {k: [] for k in hops}
for i in range(n + 5):
    for k, f in hops.items():
        t = time.perf_counter()
        f()
        if i >= 5:
            xs[k].append((time.perf_counter() - t) * 1000)
km.shutdown_kernel(now=True)
print(json.dumps({k: statistics.median(v) for k, v in xs.items()}))`

func inSandbox(tb testing.TB, d *harness.Daemon, sb *client.Sandbox, n int) map[string]float64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := d.Exec(ctx, sb.ID, client.CommandRequest{
		Argv: []string{"/opt/space/interpreter/venv/bin/python", "-c", inSandboxScript, strconv.Itoa(n)},
		Env:  map[string]string{"TOKEN": sb.AccessToken}, User: "root",
	})
	if err != nil || r.Exit.Code() != 0 {
		tb.Fatalf("in-sandbox round trips: %v %+v", err, r)
	}
	var out map[string]float64
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		tb.Fatalf("in-sandbox round trips: %q: %v", r.Stdout, err)
	}
	return out
}

// benchQuick proves `space bench --templates` measures the code
// interpreter (test/templates' TestBenchTemplatesQuick skips that part,
// having no such template): a quick run against d, where
// code-interpreter-v1 is built, gives every code figure, each positive. It
// asserts no speed.
func benchQuick(t *testing.T, d *harness.Daemon) {
	var res map[string]any
	d.Bench(t, &res, "--templates", "--quick", "--interpreter", "code-interpreter-v1", "--runsc", testenv.Runsc(), "--templates-dir", testenv.TemplatesDir())
	for _, k := range []string{"code_first_result_p50", "code_first_result_p90", "code_round_trip_p50", "code_round_trip_p90",
		"code_in_sandbox_round_trip_p50", "code_new_context_p50"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Errorf("figure %s = %v (missing or not positive)", k, res[k])
		}
	}
	// The daemon has no pools: every create restored the template.
	if res["code_pooled"] != false || res["n"] != float64(3) {
		t.Errorf("code_pooled = %v, n = %v; want false and 3", res["code_pooled"], res["n"])
	}
}
