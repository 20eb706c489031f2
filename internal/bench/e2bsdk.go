package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

//go:embed e2b_sdk.py
var e2bSDKScript string

// E2BConfig sizes the E2B SDK figure.
type E2BConfig struct {
	// Python has the e2b package (test/e2b/install-sdks.sh makes such a
	// venv); N is the number of create+run cycles of each kind.
	Python string
	N      int
	// Addr and APIKey are spaced's, given to the SDK as E2B_API_URL,
	// E2B_SANDBOX_URL and E2B_API_KEY.
	Addr, APIKey string
	Log          io.Writer
}

// E2BFigures compare the E2B Python SDK's Sandbox.create() +
// commands.run("echo hi") with the same through the native API, measured
// in the same run (native first, then the SDK, then native again), each
// create of both after the pool has a sandbox ready.
type E2BFigures struct {
	N             int     `json:"n"`
	SDKCreateP50  float64 `json:"sdk_create_p50_ms"`
	SDKRunP50     float64 `json:"sdk_run_p50_ms"`
	SDKTotalP50   float64 `json:"sdk_total_p50_ms"`
	SDKTotalP90   float64 `json:"sdk_total_p90_ms"`
	NativeP50     float64 `json:"native_total_p50_ms"`
	NativeP90     float64 `json:"native_total_p90_ms"`
	SDKNativeRate float64 `json:"sdk_over_native"`
}

// E2B measures the E2B SDK figure against the daemon behind c.
func E2B(ctx context.Context, c *client.Client, cfg E2BConfig) (*E2BFigures, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	f := &E2BFigures{N: cfg.N}
	var native Sample
	nativeRuns := func(n int) error {
		for range n {
			waitPoolReady(ctx, c)
			d, err := timeToInteractive(ctx, c)
			if err != nil {
				return fmt.Errorf("native create+exec: %w", err)
			}
			native = append(native, d)
		}
		return nil
	}
	fmt.Fprintf(cfg.Log, "bench: %d native creates + echo hi\n", cfg.N/2)
	if err := nativeRuns(cfg.N / 2); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "bench: %d E2B SDK Sandbox.create() + commands.run(\"echo hi\")\n", cfg.N)
	sdk, err := runSDK(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "bench: %d native creates + echo hi\n", cfg.N-cfg.N/2)
	if err := nativeRuns(cfg.N - cfg.N/2); err != nil {
		return nil, err
	}
	f.SDKCreateP50, f.SDKRunP50 = sdk["create"].Percentile(50), sdk["run"].Percentile(50)
	f.SDKTotalP50, f.SDKTotalP90 = sdk["total"].Percentile(50), sdk["total"].Percentile(90)
	f.NativeP50, f.NativeP90 = native.Percentile(50), native.Percentile(90)
	f.SDKNativeRate = round2(f.SDKTotalP50 / f.NativeP50)
	return f, nil
}

// runSDK runs the embedded script and returns its samples by name.
func runSDK(ctx context.Context, cfg E2BConfig) (map[string]Sample, error) {
	script, err := os.CreateTemp("", "space-bench-e2b-*.py")
	if err != nil {
		return nil, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(e2bSDKScript); err != nil {
		return nil, err
	}
	script.Close()
	addr := cfg.Addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	cmd := exec.CommandContext(ctx, cfg.Python, script.Name(), strconv.Itoa(cfg.N))
	cmd.Env = append(os.Environ(), "E2B_API_URL="+addr, "E2B_SANDBOX_URL="+addr, "E2B_API_KEY="+cfg.APIKey,
		// Each SDK create waits for a ready pool sandbox, as the native
		// ones do (waitPoolReady): both figures are of warm creates.
		"SPACE_METRICS_URL="+strings.TrimSuffix(addr, "/")+"/metrics")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("E2B SDK script: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	samples, err := parseSamples(out)
	if err != nil {
		return nil, err
	}
	if len(samples["total"]) != cfg.N {
		return nil, fmt.Errorf("E2B SDK script gave %d samples, want %d", len(samples["total"]), cfg.N)
	}
	return samples, nil
}

// parseSamples reads the one JSON line an SDK script prints: samples in
// milliseconds by name.
func parseSamples(out []byte) (map[string]Sample, error) {
	var raw map[string][]float64
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("the SDK script printed %q: %w", out, err)
	}
	samples := map[string]Sample{}
	for k, ms := range raw {
		for _, v := range ms {
			samples[k] = append(samples[k], time.Duration(v*float64(time.Millisecond)))
		}
	}
	return samples, nil
}
