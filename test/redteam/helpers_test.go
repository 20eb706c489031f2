package redteam

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// run runs a command and fails the test unless it ends (with any exit
// code); attacks get 3 minutes.
func run(t *testing.T, d *harness.Daemon, id string, req client.CommandRequest) harness.Result {
	t.Helper()
	r, err := d.Exec(harness.Ctx(t, 3*time.Minute), id, req)
	if err != nil {
		t.Fatalf("run %q%q in %s: %v", req.Cmd, req.Argv, id, err)
	}
	return r
}

// sh runs cmd as user and fails the test unless it exits 0.
func sh(t *testing.T, d *harness.Daemon, id, user, cmd string) string {
	t.Helper()
	r := run(t, d, id, client.CommandRequest{Cmd: cmd, User: user})
	if r.Exit.Code() != 0 {
		t.Fatalf("%q in %s: exit %+v\nstdout: %s\nstderr: %s", cmd, id, *r.Exit, harness.Clip(r.Stdout), harness.Clip(r.Stderr))
	}
	return r.Stdout
}

// raw sends one request to spaced and returns status, headers and body.
// hdr values of "" delete a header; the API key is sent unless deleted.
func raw(ctx context.Context, d *harness.Daemon, method, path string, body io.Reader, hdr map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.Addr+path, body)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+d.APIKey)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if k, ok := hdr["Host"]; ok {
		req.Host = k
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, resp.Header, b, err
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

// canary is what the host holds that no sandbox may see or change: files
// with random names and contents, and kernel settings a sandbox might try
// to change through an escape.
type canary struct {
	files    map[string]string // path -> content
	settings map[string]string // /proc path -> value at start
	template map[string]string // template file -> sha256 at start
	start    time.Time
}

// hostSettings are host files an escape would change.
var hostSettings = []string{
	"/proc/sys/kernel/hostname",
	"/proc/sys/kernel/domainname",
	"/proc/sys/kernel/core_pattern",
	"/proc/sys/kernel/modules_disabled",
	"/proc/sys/vm/overcommit_memory",
	"/proc/sys/kernel/panic",
	"/proc/sys/net/ipv4/conf/all/forwarding",
	"/proc/sys/fs/file-max",
}

func newCanary(d *harness.Daemon) (*canary, error) {
	c := &canary{files: map[string]string{}, settings: map[string]string{}, start: time.Now()}
	for _, dir := range []string{"/tmp", "/var/tmp", "/root", filepath.Dir(d.DataDir)} {
		p := filepath.Join(dir, "rt-canary-"+harness.RandHex(8))
		content := "RTCANARY-" + harness.RandHex(16)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return nil, err
		}
		c.files[p] = content
	}
	c.template = map[string]string{}
	for _, f := range templateFiles {
		p := filepath.Join(testenv.BaseRootfs(), f)
		sum, err := fileSum(p)
		if err != nil {
			return nil, err
		}
		c.template[p] = sum
	}
	for _, p := range hostSettings {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		c.settings[p] = string(b)
	}
	return c, nil
}

// check reports any change to the host's canaries and settings, and a
// wall clock that moved against the monotonic one.
func (c *canary) check() error {
	var errs []string
	for p, want := range c.files {
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			errs = append(errs, fmt.Sprintf("canary %s: %q %v, want %q", p, got, err, want))
		}
	}
	for p, want := range c.settings {
		if p == "/proc/sys/net/ipv4/conf/all/forwarding" {
			continue // the network tests turn forwarding on for a while themselves
		}
		got, _ := os.ReadFile(p)
		if string(got) != want {
			errs = append(errs, fmt.Sprintf("host setting %s is %q, was %q", p, got, want))
		}
	}
	if err := c.checkTemplate(); err != nil {
		errs = append(errs, err.Error())
	}
	// time.Since uses the monotonic clock; a sandbox that set the host's
	// wall clock would make the two disagree. The attempts move it by
	// hours; the host's own time keeping (a VM's clock sync) steps it by
	// seconds now and then (2.4 s seen in CI, failing every test running
	// at that moment), so a minute is the bar.
	if drift := time.Now().Round(0).Sub(c.start.Round(0)) - time.Since(c.start); drift > time.Minute || drift < -time.Minute {
		errs = append(errs, fmt.Sprintf("the host's wall clock moved by %s against the monotonic clock", drift))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// templateFiles are files of the base template that attempts write to.
// (The agent binary is left out: other test runs reinstall it; guard greps
// the neighbour's copy instead.)
var templateFiles = []string{"usr/bin/python3.11", "etc/passwd", "bin/dash"}

func (c *canary) checkTemplate() error {
	for p, want := range c.template {
		if got, err := fileSum(p); err != nil || got != want {
			return fmt.Errorf("template file %s changed on the host (%v)", p, err)
		}
	}
	return nil
}

func fileSum(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (c *canary) remove() {
	for p := range c.files {
		os.Remove(p)
	}
}

// contents are the canaries' secret strings.
func (c *canary) contents() []string {
	var s []string
	for _, v := range c.files {
		s = append(s, v)
	}
	return s
}

func (c *canary) paths() []string {
	var s []string
	for p := range c.files {
		s = append(s, p)
	}
	return s
}

// neighbour is a sandbox that attacks must not disturb: it holds a marker
// file and must keep answering.
type neighbourSB struct {
	sb     *client.Sandbox
	marker string
	err    error
}

var (
	neighbourOnce sync.Once
	neighbour     neighbourSB
)

const neighbourMarkerPath = "/home/user/neighbour-marker"

// getNeighbour makes the shared neighbour once; TestMain's shutdown kills it.
func getNeighbour(t *testing.T, d *harness.Daemon) *neighbourSB {
	t.Helper()
	neighbourOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"role": "neighbour"}, TimeoutSeconds: 3600})
		if err != nil {
			neighbour.err = err
			return
		}
		neighbour.sb, neighbour.marker = sb, "NEIGHBOUR-"+harness.RandHex(16)
		_, neighbour.err = d.Client.Upload(ctx, sb.ID, neighbourMarkerPath, strings.NewReader(neighbour.marker))
	})
	if neighbour.err != nil {
		t.Fatalf("neighbour sandbox: %v", neighbour.err)
	}
	return &neighbour
}

// secrets are strings no attempt's output may contain: the host canaries,
// spaced's API key and data directory, and the neighbour's marker and
// access token.
func secrets(t *testing.T, d *harness.Daemon) []string {
	n := getNeighbour(t, d)
	s := append(env.canary.contents(), d.APIKey, d.DataDir, harness.Tmp(), n.marker, n.sb.AccessToken)
	return s
}

// guard checks, after a group of attempts, that the host, spaced and the
// neighbour are unaffected: /healthz answers within 5 s, the neighbour
// runs a command and its marker is intact, and the host canaries are
// unchanged.
func guard(t *testing.T, d *harness.Daemon) {
	t.Helper()
	if err := d.HealthyWithin(5 * time.Second); err != nil {
		t.Fatalf("spaced is not healthy: %v", err)
	}
	n := getNeighbour(t, d)
	out, err := d.Exec(harness.Ctx(t, 30*time.Second), n.sb.ID, client.CommandRequest{
		Cmd: "cat " + neighbourMarkerPath + "; ! grep -l RTPWNED /etc/passwd /usr/bin/python3.11 /bin/dash /usr/local/bin/space-agent", User: "root"})
	if err != nil || out.Exit.Code() != 0 || out.Stdout != n.marker {
		t.Fatalf("the neighbour sandbox is disturbed: %v, exit %+v, marker %q (want %q), stderr %q", err, out.Exit, out.Stdout, n.marker, out.Stderr)
	}
	if err := env.canary.check(); err != nil {
		t.Fatalf("host: %v", err)
	}
}

// spacedRSS is spaced's resident memory in KiB (VmRSS).
func spacedRSS(t *testing.T, d *harness.Daemon) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	t.Fatal("no VmRSS in spaced's status")
	return 0
}

// hostIfNames are the host's network interfaces whose names the sandbox's
// own cannot share (lo and eth0 left out).
func hostIfNames() []string {
	var out []string
	for _, n := range harness.DirEntries("/sys/class/net") {
		if n != "lo" && n != "eth0" {
			out = append(out, n)
		}
	}
	return out
}
