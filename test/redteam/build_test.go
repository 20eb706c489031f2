package redteam

// Build-time attempts: a template build runs untrusted steps (a Dockerfile
// is code), so each attempt is a build whose steps attack, and a check of
// what reached the host, spaced or a neighbour, and of what the layers the
// steps left made of the template's image on the host.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

const buildStops = "the step runs in a gVisor sandbox of its own with the build's egress policy (internet allowed, the platform floor never): nftables and the egress gateway as for any sandbox"

// buildFix is what the build attempts share: targets that answer the host
// with a marker, and the result of one build whose step probed them.
var buildFix struct {
	once        sync.Once
	err         error
	res         map[string]string // target -> what the step got
	ctl         map[string]any
	markers     map[string]string // target -> the marker it must not get
	hostControl map[string]string // target -> what the host got (must hold the marker)
}

func buildAttempts() []attempt {
	net := func(id, family, desc string, targets ...string) attempt {
		return attempt{id: id, category: "build", family: family, desc: desc, stops: buildStops,
			control: "a server of the step's own on its loopback answers it; the host gets each target's marker",
			run:     func(t *testing.T) error { return buildNetCheck(t, targets...) }}
	}
	return []attempt{
		net("build-net-spaced", "build-net-host", "a RUN step fetches spaced's /healthz at the host end of its veth", "spaced"),
		net("build-net-host-listener", "build-net-host", "a RUN step fetches a host HTTP listener through the veth address and the host's other address", "host-listener", "host-other"),
		net("build-net-metadata", "", "a RUN step fetches 169.254.169.254 and 100.64.0.1 (a test host in a namespace answering the host), with the build's internet access on", "metadata", "cgnat"),
		net("build-net-neighbour", "", "a RUN step fetches a file served by a running sandbox", "neighbour"),
		{id: "build-layer-symlink", category: "build", desc: "steps make links to host paths (/root, a host canary's directory), write through them and COPY through them, so the layers hold files under those names",
			stops:   "the layers are applied on the host by containerd's archive code inside the image's root: a link is resolved within the image, never on the host",
			control: "a sandbox of the template sees the files at the link targets inside",
			run:     buildLayerSymlink},
		{id: "build-agent-replace", category: "build", desc: "a step replaces /usr/local/bin/space-agent with a script of its own, so sandboxes of the template would run it as init",
			stops:   "every image gets the platform's agent put in last (replacing, never writing through, what the layers left there)",
			control: "the step's own sandbox ran its replacement",
			run:     buildAgentReplace},
		{id: "build-setuid-device", category: "build", desc: "steps leave a set-uid root shell, a character device node and a FIFO in the image, which the host holds",
			stops:   "device nodes are left out when layers are applied; images live under a 0700 directory owned by root, so no host user reaches a set-uid file in them",
			control: "the set-uid bit and the FIFO are there inside a sandbox of the template",
			run:     buildSetuidDevice},
	}
}

// TestBuildSteps runs the build-time attempts. It is not parallel: it owns
// the test namespace's metadata addresses while it runs (TestNetwork
// needs them too, later).
func TestBuildSteps(t *testing.T) {
	need(t)
	for _, a := range buildAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
	if err := env.canary.check(); err != nil {
		t.Errorf("host canaries after the builds: %v", err)
	}
}

// build runs a build on the red-team daemon and returns it ended.
func rtBuild(t *testing.T, d *harness.Daemon, ctxFiles map[string]string, req client.BuildRequest) *client.Build {
	t.Helper()
	ctx := harness.Ctx(t, 5*time.Minute)
	if ctxFiles != nil {
		dir := t.TempDir()
		for name, body := range ctxFiles {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		up, err := d.Client.UploadContext(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		req.Context = up.Hash
	}
	b, err := d.Client.StartBuild(ctx, req)
	if err != nil {
		t.Fatalf("start build %s: %v", req.Name, err)
	}
	for !b.Done() {
		time.Sleep(200 * time.Millisecond)
		if b, err = d.Client.GetBuild(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// buildLog is a build's whole log.
func buildLog(t *testing.T, d *harness.Daemon, id string) string {
	s, err := d.Client.BuildLogs(harness.Ctx(t, time.Minute), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b strings.Builder
	for {
		e, err := s.Next()
		if err != nil {
			return b.String()
		}
		b.WriteString(e.Message + "\n")
	}
}

// buildNetCheck: none of targets gave the step its marker, and the
// controls worked.
func buildNetCheck(t *testing.T, targets ...string) error {
	buildFix.once.Do(func() { buildFix.err = buildNetProbe(t) })
	if buildFix.err != nil {
		return buildFix.err
	}
	for name, v := range buildFix.ctl {
		if s, _ := v.(string); s != "" {
			return fmt.Errorf("positive control %s failed: %v", name, v)
		}
	}
	for _, target := range targets {
		got, marker := buildFix.res[target], buildFix.markers[target]
		if !strings.Contains(buildFix.hostControl[target], marker) {
			return fmt.Errorf("positive control: the host did not get %s's marker (%q)", target, buildFix.hostControl[target])
		}
		if strings.Contains(got, marker) {
			return fmt.Errorf("the build step reached %s: %q", target, got)
		}
		t.Logf("%s: the step got %q", target, got)
	}
	return nil
}

// buildNetProbe sets up the targets and runs the probing build once.
func buildNetProbe(t *testing.T) error {
	d := env.d
	marker := func(what string) string { return what + "-" + harness.RandHex(8) }
	hostMark, nsMark := marker("RT-HOST"), marker("RT-NS")
	serve := func(ln net.Listener, body string) {
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	}
	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		return err
	}
	t.Cleanup(func() { hostLn.Close() })
	serve(hostLn, hostMark)
	nsLn, err := testNamespace(t).Listen("tcp", ":0")
	if err != nil {
		return err
	}
	t.Cleanup(func() { nsLn.Close() })
	serve(nsLn, nsMark)
	n := getNeighbour(t, d)
	if _, err := d.Client.StartBackground(harness.Ctx(t, 10*time.Second), n.sb.ID, client.CommandRequest{
		Cmd: "python3 -m http.server 8001 --directory /home/user", Tag: "rt-build-http", TimeoutSeconds: 600}); err != nil {
		return err
	}
	_, nIP := vethAddrs(t, n.sb.ID)
	hostPort := strconv.Itoa(hostLn.Addr().(*net.TCPAddr).Port)
	nsPort := strconv.Itoa(nsLn.Addr().(*net.TCPAddr).Port)
	_, spacedPort, _ := net.SplitHostPort(d.Addr)
	other := hostAddrs(t, "-4")
	if len(other) == 0 {
		return errors.New("the host has no other IPv4 address to try")
	}
	urls := map[string]string{
		"spaced":        "http://GATEWAY:" + spacedPort + "/healthz",
		"host-listener": "http://GATEWAY:" + hostPort + "/",
		"host-other":    "http://" + other[0] + ":" + hostPort + "/",
		"metadata":      "http://169.254.169.254:" + nsPort + "/",
		"cgnat":         "http://100.64.0.1:" + nsPort + "/",
		"neighbour":     "http://" + nIP + ":8001/neighbour-marker",
	}
	buildFix.markers = map[string]string{"spaced": `"status":"ok"`, "host-listener": hostMark, "host-other": hostMark,
		"metadata": nsMark, "cgnat": nsMark, "neighbour": n.marker}
	// The controls, from the host: each target answers with its marker.
	buildFix.hostControl = map[string]string{}
	hc := &http.Client{Timeout: 5 * time.Second}
	for name, u := range urls {
		u = strings.Replace(u, "GATEWAY", "127.0.0.1", 1)
		if !harness.WaitFor(10*time.Second, func() bool {
			resp, err := hc.Get(u)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			buildFix.hostControl[name] = string(b)
			return strings.Contains(string(b), buildFix.markers[name])
		}) {
			return fmt.Errorf("control: the host cannot get %s (%s): %q", name, u, buildFix.hostControl[name])
		}
	}
	targets, _ := json.Marshal(urls)
	script, _ := scripts.ReadFile("attempts/build.py")
	b := rtBuild(t, d, map[string]string{"build.py": string(script)}, client.BuildRequest{
		Name: "rt-build-net", From: &client.BuildFrom{Template: "base"}, NoCache: true,
		Steps: []client.BuildStep{
			{Copy: &client.BuildCopy{Src: []string{"build.py"}, Dest: "/rt/build.py"}},
			{Env: map[string]string{"RT_BUILD": string(targets)}},
			{Run: "python3 /rt/build.py", User: "root"},
		}})
	if b.State != client.BuildStateReady {
		return fmt.Errorf("the probing build %s: %+v", b.State, b.Error)
	}
	log := buildLog(t, d, b.ID)
	m := regexp.MustCompile(`RTBUILD (\{.*\})`).FindStringSubmatch(log)
	if m == nil {
		return fmt.Errorf("the build step printed no result:\n%s", log)
	}
	var out struct {
		Gateway string            `json:"gateway"`
		Res     map[string]string `json:"res"`
		Ctl     map[string]any    `json:"ctl"`
	}
	if err := json.Unmarshal([]byte(m[1]), &out); err != nil {
		return err
	}
	if out.Gateway == "" {
		return errors.New("the build step found no gateway")
	}
	buildFix.res, buildFix.ctl = out.Res, out.Ctl
	return nil
}

func buildLayerSymlink(t *testing.T) error {
	d := env.d
	canaryDir := filepath.Dir(env.canary.paths()[0])
	name := "rt-layer-" + harness.RandHex(4)
	b := rtBuild(t, d, map[string]string{"payload.txt": "PAYLOAD"}, client.BuildRequest{
		Name: name, From: &client.BuildFrom{Template: "base"}, NoCache: true,
		Steps: []client.BuildStep{
			// The link targets exist inside too, so the links resolve there.
			{Run: fmt.Sprintf("mkdir -p %[1]s && ln -s /root /esc-root && ln -s %[1]s /esc-dir && echo WROTE > /esc-root/%[2]s-run", canaryDir, name), User: "root"},
			{Copy: &client.BuildCopy{Src: []string{"payload.txt"}, Dest: "/esc-dir/" + name + "-copy"}},
			{Copy: &client.BuildCopy{Src: []string{"payload.txt"}, Dest: "/esc-root/" + name + "-copy"}},
		}})
	if b.State != client.BuildStateReady {
		return fmt.Errorf("build %s: %+v", b.State, b.Error)
	}
	for _, p := range []string{"/root/" + name + "-run", "/root/" + name + "-copy", filepath.Join(canaryDir, name+"-copy")} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			return fmt.Errorf("a layer wrote %s on the host", p)
		}
	}
	if err := env.canary.check(); err != nil {
		return err
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
	got := sh(t, d, sb.ID, "root", fmt.Sprintf("cat /root/%[1]s-run /root/%[1]s-copy %[2]s/%[1]s-copy", name, canaryDir))
	if got != "WROTE\nPAYLOADPAYLOAD" {
		return fmt.Errorf("positive control: inside, the files through the links read %q", got)
	}
	return nil
}

func buildAgentReplace(t *testing.T) error {
	d := env.d
	name := "rt-agent-" + harness.RandHex(4)
	b := rtBuild(t, d, nil, client.BuildRequest{
		Name: name, From: &client.BuildFrom{Template: "base"}, NoCache: true,
		Steps: []client.BuildStep{{Run: "rm -f /usr/local/bin/space-agent && printf '#!/bin/sh\\necho HIJACKED\\n' > /usr/local/bin/space-agent && chmod 755 /usr/local/bin/space-agent && /usr/local/bin/space-agent", User: "root"}},
	})
	if b.State != client.BuildStateReady {
		return fmt.Errorf("build %s: %+v", b.State, b.Error)
	}
	if !strings.Contains(buildLog(t, d, b.ID), "HIJACKED") {
		return errors.New("positive control: the step's replacement did not run in its own sandbox")
	}
	want, err := fileSum(filepath.Join(testenv.BaseRootfs(), "usr/local/bin/space-agent"))
	if err != nil {
		return err
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
	got := strings.Fields(sh(t, d, sb.ID, "root", "sha256sum /usr/local/bin/space-agent"))
	if len(got) == 0 || got[0] != want {
		return fmt.Errorf("the template's sandboxes run agent %v, not the platform's %s", got, want)
	}
	return nil
}

func buildSetuidDevice(t *testing.T) error {
	d := env.d
	name := "rt-suid-" + harness.RandHex(4)
	b := rtBuild(t, d, nil, client.BuildRequest{
		Name: name, From: &client.BuildFrom{Template: "base"}, NoCache: true,
		Steps: []client.BuildStep{{Run: "cp /bin/dash /rt-rootsh && chmod 4755 /rt-rootsh && mkfifo /rt-fifo && (mknod /rt-chardev c 1 3 && echo MKNOD-OK || echo MKNOD-REFUSED)", User: "root"}},
	})
	if b.State != client.BuildStateReady {
		return fmt.Errorf("build %s: %+v", b.State, b.Error)
	}
	t.Logf("mknod in the step: %s", regexp.MustCompile(`MKNOD-\w+`).FindString(buildLog(t, d, b.ID)))
	images := filepath.Join(testenv.TemplatesDir(), "_images")
	st, err := os.Stat(images)
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || st.Mode().Perm() != 0o700 || sys.Uid != 0 {
		return fmt.Errorf("%s is %v owned by %v: host users could reach set-uid files in images", images, st.Mode(), st.Sys())
	}
	// The image holds the base's own /dev entries (debootstrap's) and no
	// device node a step made.
	root := filepath.Join(images, b.Image)
	var devices []string
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err == nil && e.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			if _, berr := os.Lstat(filepath.Join(testenv.BaseRootfs(), rel)); berr != nil {
				devices = append(devices, p)
			}
		}
		return nil
	})
	if len(devices) > 0 {
		return fmt.Errorf("device nodes a step made are in the image on the host: %v", devices)
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
	// %s is asked for too: gVisor leaves the size out of a statx that did
	// not ask for it, and stat's %F alone then says "regular empty file".
	if got := sh(t, d, sb.ID, "root", "stat -c '%a %F %s' /rt-rootsh /rt-fifo"); !regexp.MustCompile(`^4755 regular file [1-9]\d*\n644 fifo 0\n$`).MatchString(got) {
		return fmt.Errorf("positive control: inside, %q", got)
	}
	return nil
}
