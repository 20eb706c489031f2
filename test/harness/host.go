package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
)

// What spaced leaves on the host, seen from outside as a user of the
// machine would see it. Cgroup paths come from the gVisor driver, which
// knows both hierarchies (v1 and v2); nothing here guesses them.

// Leftovers lists what sandbox id of d still holds on the host: runsc
// state, its bundle dir, its network namespace and host link, cgroups and
// runsc processes.
func (d *Daemon) Leftovers(id string) []string {
	var left []string
	check := func(what, p string) {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, what+" "+p)
		}
	}
	states, _ := filepath.Glob(filepath.Join(d.DataDir, "runsc", id+"*"))
	for _, s := range states {
		left = append(left, "runsc state "+s)
	}
	check("bundle dir", filepath.Join(d.DataDir, "sandboxes", id))
	check("netns", "/var/run/netns/space-"+id)
	check("veth", "/sys/class/net/"+HostIf(id))
	for _, c := range gvisor.CgroupDirs(id) {
		left = append(left, "cgroup "+c)
	}
	for _, p := range RunscProcs(id) {
		left = append(left, fmt.Sprintf("process %d %s", p.Pid, p.Name))
	}
	return left
}

// LeftoversAfter polls until sandbox id of d holds nothing on the host,
// or the timeout passes, and returns what it still holds. A pause answers
// once the sandbox is recorded paused and tears the old one down in the
// background (a resume on the same node waits for it): its resources go
// within a fraction of a second, not before the answer. Nodes that share
// a host share the names of netns, links and cgroups, so a test that
// resumes a sandbox on another node of this host waits for this first.
func (d *Daemon) LeftoversAfter(id string, timeout time.Duration) []string {
	left := d.Leftovers(id)
	WaitFor(timeout, func() bool { left = d.Leftovers(id); return len(left) == 0 })
	return left
}

// HostIf is the name of sandbox id's link on the host.
func HostIf(id string) string { return "vse" + id[:min(12, len(id))] }

// Proc is a host process of one sandbox (runsc-sandbox, runsc-gofer).
type Proc struct {
	Pid  int
	Name string
}

// RunscProcs finds the runsc processes whose command line ends with the
// sandbox id (runsc's container id is the sandbox id).
func RunscProcs(id string) []Proc {
	var out []Proc
	for _, e := range DirEntries("/proc") {
		pid, err := strconv.Atoi(e)
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || !strings.HasPrefix(args[0], "runsc") || args[len(args)-1] != id {
			continue
		}
		out = append(out, Proc{Pid: pid, Name: args[0]})
	}
	return out
}

// SandboxPid reads the sandbox process's pid from runsc's state file.
func (d *Daemon) SandboxPid(t testing.TB, id string) int {
	t.Helper()
	var st struct {
		Sandbox struct {
			Pid int `json:"pid"`
		} `json:"sandbox"`
	}
	readJSON(t, filepath.Join(d.DataDir, "runsc", id+"_sandbox:"+id+".state"), &st)
	return st.Sandbox.Pid
}

// BootToken reads the boot token spaced gave sandbox id's agent from the
// sandbox's OCI spec on the host (inside, the agent is not dumpable, so
// not even root there can read it from /proc/1/environ); "" if it has none.
func (d *Daemon) BootToken(t testing.TB, id string) string {
	t.Helper()
	var spec struct {
		Process struct {
			Env []string `json:"env"`
		} `json:"process"`
	}
	readJSON(t, filepath.Join(d.DataDir, "sandboxes", id, "bundle", "config.json"), &spec)
	for _, kv := range spec.Process.Env {
		if v, ok := strings.CutPrefix(kv, "SPACE_AGENT_TOKEN="); ok {
			return v
		}
	}
	return ""
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// HostNetNames lists the space-* namespaces and vse* links on the host.
func HostNetNames() (netns, links map[string]bool) {
	netns, links = map[string]bool{}, map[string]bool{}
	for _, n := range DirEntries("/var/run/netns") {
		if strings.HasPrefix(n, "space-") {
			netns[n] = true
		}
	}
	for _, n := range DirEntries("/sys/class/net") {
		if strings.HasPrefix(n, "vse") {
			links[n] = true
		}
	}
	return netns, links
}

// LiveAnywhere reports whether an id (or a vse link name) is a live
// sandbox of any daemon this test binary started.
func LiveAnywhere(t testing.TB, idOrLink string) bool {
	for _, d := range Daemons() {
		list, err := d.Client.ListAllSandboxes(Ctx(t, 5*time.Second), client.ListOptions{States: []string{"creating", "running"}})
		if err != nil {
			continue
		}
		for _, sb := range list {
			if sb.ID == idOrLink || HostIf(sb.ID) == idOrLink {
				return true
			}
		}
	}
	return false
}

// DirEntries lists the names in dir (none if it cannot be read).
func DirEntries(dir string) []string {
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// CPUStat is what sandbox id's cgroups say about its CPU use: everything
// in them (sentry, gofer and the guest they run) counts.
type CPUStat struct {
	Usage     time.Duration // CPU time used so far
	Throttled int64         // CFS periods in which the quota ran out
}

// SandboxCPU reads sandbox id's CPU use from the cgroups the gVisor driver
// placed it in: cpuacct.usage and cpu.stat on cgroup v1, cpu.stat on v2.
func SandboxCPU(id string) (CPUStat, error) {
	var st CPUStat
	dirs := gvisor.CgroupDirs(id)
	found := false
	for _, dir := range dirs {
		if raw, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				return st, fmt.Errorf("%s/cpuacct.usage: %w", dir, err)
			}
			st.Usage, found = time.Duration(ns), true
		}
		raw, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil:
			case k == "usage_usec":
				st.Usage, found = time.Duration(n)*time.Microsecond, true
			case k == "nr_throttled":
				st.Throttled = n
			}
		}
	}
	if !found {
		return st, fmt.Errorf("no CPU accounting for sandbox %s in its cgroups %v", id, dirs)
	}
	return st, nil
}

// unmountUnder detaches every mount below dir, deepest first: what the
// suite's daemons leave mounted in their data directories when they stop
// (a volume stays mounted while it exists, across spaced's restarts, and
// runsc keeps its null-netns), so that the suite's directory can go and
// no loop device outlives the run.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		// "id parent major:minor root mountpoint options ...", the mount
		// point with octal escapes for spaces and the like.
		if f := strings.Fields(line); len(f) > 4 {
			p := unescapeMountPath(f[4])
			if p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// SandboxFrozen reads whether sandbox id's sentry and gofer are frozen by
// the cgroup freezer (v1 freezer.state FROZEN, v2 cgroup.events "frozen
// 1"), in the "rest" child of its cgroup where the gVisor driver freezes a
// sandbox at rest; false if it was never frozen.
func SandboxFrozen(id string) (bool, error) {
	dirs := gvisor.CgroupDirs(id)
	if len(dirs) == 0 {
		return false, fmt.Errorf("no cgroup for sandbox %s", id)
	}
	for _, parent := range dirs {
		dir := filepath.Join(parent, "rest")
		if raw, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
			return strings.TrimSpace(string(raw)) == "FROZEN", nil
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil {
			return strings.Contains(string(raw), "frozen 1"), nil
		}
		if lexists(filepath.Join(parent, "freezer.state")) || lexists(filepath.Join(parent, "cgroup.freeze")) {
			return false, nil // never frozen: no rest cgroup yet
		}
	}
	return false, fmt.Errorf("no freezer cgroup for sandbox %s", id)
}

func lexists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
