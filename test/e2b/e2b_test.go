// Package e2b_test runs the unmodified E2B SDKs (Python from PyPI, JS from
// npm, both pinned) against a real spaced with real gVisor sandboxes. The
// SDKs are pointed at spaced only with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY, as a user would. It skips where spaced cannot run (not root,
// no runsc, no base template); the SDKs are installed by install-sdks.sh
// when missing.
package e2b_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/spacesandbox/space/internal/egress"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const suiteTimeout = 4 * time.Minute

// e2bCIDR is the sandbox range of the suite's spaced.
const e2bCIDR = "10.242.0.0/20"

func TestE2BSDKs(t *testing.T) {
	runsc := envOr("SPACE_RUNSC", "/usr/local/lib/space/bin/runsc")
	templates := envOr("SPACE_TEMPLATES_DIR", "/var/lib/space/templates")
	switch {
	case os.Geteuid() != 0:
		t.Skip("skipping: the E2B SDK tests run spaced, which needs root")
	case !exists(runsc):
		t.Skipf("skipping: no runsc at %s (run scripts/install-deps.sh or set SPACE_RUNSC)", runsc)
	case !exists(filepath.Join(templates, "base", "current")):
		t.Skipf("skipping: no base template at %s/base/current (run scripts/build-template.sh)", templates)
	}
	for _, tool := range []string{"python3", "node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the E2B SDKs: %v", tool, err)
		}
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Clean(filepath.Join(here, "..", ".."))
	tmp, err := os.MkdirTemp("", "space-e2b-")
	if err != nil {
		t.Fatal(err)
	}

	run(t, repo, nil, "go", "build", "-o", filepath.Join(tmp, "spaced"), "./cmd/spaced")
	run(t, repo, []string{"CGO_ENABLED=0"}, "go", "build", "-o", filepath.Join(tmp, "space-agent"), "./cmd/space-agent")
	run(t, repo, nil, "scripts/build-template.sh", "--out", templates, "--agent", filepath.Join(tmp, "space-agent"))
	if !exists(filepath.Join(here, ".venv", ".installed")) || !exists(filepath.Join(here, "js", "node_modules", ".installed")) {
		run(t, here, nil, "./install-sdks.sh")
	}

	d := startSpaced(t, tmp, runsc, templates)
	defer func() {
		d.stop(t)
		if !t.Failed() {
			syscall.Unmount(filepath.Join(d.dataDir, "runsc", "null-netns"), syscall.MNT_DETACH)
			os.RemoveAll(tmp)
		} else {
			t.Logf("spaced data and log kept in %s", tmp)
		}
	}()

	sdkEnv := []string{
		"E2B_API_URL=http://" + d.addr,
		"E2B_SANDBOX_URL=http://" + d.addr,
		"E2B_API_KEY=" + d.apiKey,
	}
	t.Run("python", func(t *testing.T) {
		suite(t, d, filepath.Join(here, "python"), sdkEnv,
			filepath.Join(here, ".venv", "bin", "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", ".")
	})
	t.Run("js", func(t *testing.T) {
		tests, _ := filepath.Glob(filepath.Join(here, "js", "*.test.mjs"))
		if len(tests) == 0 {
			t.Fatal("no JS tests found")
		}
		suite(t, d, filepath.Join(here, "js"), sdkEnv,
			"node", append([]string{"--test", "--test-concurrency=4", "--test-force-exit"}, tests...)...)
	})
}

// suite runs one SDK's test suite as a subprocess and fails t (printing
// its output and the tail of spaced's log) when it fails.
func suite(t *testing.T, d *spaced, dir string, env []string, name string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutE2B(os.Environ()), env...)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s (%s):\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Errorf("%s failed: %v", filepath.Base(name), err)
		t.Logf("spaced log (tail):\n%s", d.logTail(60))
	}
}

type spaced struct {
	addr, apiKey, dataDir, logPath string
	cmd                            *exec.Cmd
	done                           chan struct{}
}

func startSpaced(t *testing.T, tmp, runsc, templates string) *spaced {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 20)
	rand.Read(key)
	d := &spaced{
		addr:    fmt.Sprintf("127.0.0.1:%d", port),
		apiKey:  "e2b_" + hex.EncodeToString(key), // the shape every SDK version accepts
		dataDir: filepath.Join(tmp, "data"),
		logPath: filepath.Join(tmp, "spaced.log"),
		done:    make(chan struct{}),
	}
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(filepath.Join(tmp, "spaced"))
	d.cmd.Env = append(os.Environ(),
		"SPACE_DATA_DIR="+d.dataDir,
		"SPACE_TEMPLATES_DIR="+templates,
		"SPACE_RUNSC="+runsc,
		"SPACE_API_KEY="+d.apiKey,
		"SPACE_ADDR="+d.addr,
		"SPACE_SANDBOX_CIDR="+e2bCIDR,
		"SPACE_LOG_LEVEL=debug",
	)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	hc := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-d.done:
			t.Fatalf("spaced exited at start: %s\n%s", d.cmd.ProcessState, d.logTail(40))
		default:
		}
		if resp, err := hc.Get("http://" + d.addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
	}
	d.cmd.Process.Kill()
	t.Fatalf("spaced did not answer /healthz within 30s\n%s", d.logTail(40))
	return nil
}

// stop kills every sandbox spaced still runs (they outlive spaced by
// design), then stops spaced with SIGTERM.
func (d *spaced) stop(t *testing.T) {
	hc := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+d.addr+"/sandboxes", nil)
	req.Header.Set("X-API-KEY", d.apiKey)
	if resp, err := hc.Do(req); err == nil {
		var list []struct {
			SandboxID string `json:"sandboxID"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		for _, sb := range list {
			t.Logf("killing sandbox %s left by the SDK tests", sb.SandboxID)
			del, _ := http.NewRequest(http.MethodDelete, "http://"+d.addr+"/sandboxes/"+sb.SandboxID, nil)
			del.Header.Set("X-API-KEY", d.apiKey)
			if resp, err := hc.Do(del); err == nil {
				resp.Body.Close()
			}
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("spaced did not exit within 20s of SIGTERM")
	}
	// spaced keeps its egress firewall table when it stops (its sandboxes
	// may outlive it); this daemon is gone for good.
	egress.RemoveRules(netip.MustParsePrefix(e2bCIDR))
}

func (d *spaced) logTail(n int) string {
	b, _ := os.ReadFile(d.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// withoutE2B drops the caller's E2B_* settings (a real E2B key, debug
// mode, a domain) so that only the ones pointing at spaced apply.
func withoutE2B(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "E2B_") {
			out = append(out, kv)
		}
	}
	return out
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
