package gvisor

import (
	"github.com/spacesandbox/space/internal/runtime"
)

// The OCI runtime spec, only the parts spaced sets.
type ociConfig struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       ociRoot    `json:"root"`
	Hostname   string     `json:"hostname"`
	Mounts     []ociMount `json:"mounts"`
	Linux      ociLinux   `json:"linux"`
}

type ociProcess struct {
	User         ociUser          `json:"user"`
	Args         []string         `json:"args"`
	Env          []string         `json:"env"`
	Cwd          string           `json:"cwd"`
	Capabilities *ociCapabilities `json:"capabilities"`
	Rlimits      []ociRlimit      `json:"rlimits"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Permitted   []string `json:"permitted"`
	Inheritable []string `json:"inheritable"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	Resources   ociResources   `json:"resources"`
	CgroupsPath string         `json:"cgroupsPath"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type ociResources struct {
	Memory ociMemory `json:"memory"`
	CPU    ociCPU    `json:"cpu"`
	Pids   ociPids   `json:"pids"`
}

type ociMemory struct {
	Limit int64 `json:"limit"`
}

type ociCPU struct {
	Shares uint64 `json:"shares,omitempty"`
	Quota  int64  `json:"quota"`
	Period uint64 `json:"period"`
}

// CPU shares (cgroup v1 cpu.shares; runsc maps them to cpu.weight on v2)
// of a sandbox booting in the background, of every other sandbox, and of
// one restored while someone waits. A pool refill at 2 against 1024 takes
// the CPU only when claimed sandboxes leave it idle; a restore at 8 times
// the default takes most of it from busy sandboxes for the moment it
// runs, each sandbox's own CPU limit (its quota) still holding.
const (
	backgroundShares = 2
	defaultShares    = 1024
	urgentShares     = 8 * defaultShares
)

// cpuPeriod is the CFS period of every sandbox's CPU quota (µs).
const cpuPeriod = 100000

type ociPids struct {
	Limit int64 `json:"limit"`
}

// capabilities of the agent (and, through it, of root inside the sandbox):
// Docker's default set without CAP_NET_RAW. They are capabilities of the
// gVisor kernel, not the host's.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// ociSpec is the bundle config of one sandbox.
func ociSpec(s runtime.Spec) ociConfig {
	caps := &ociCapabilities{Bounding: capabilities, Effective: capabilities, Permitted: capabilities}
	memory := int64(s.Limits.MemoryMB) << 20
	return ociConfig{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			Args:         s.Args,
			Env:          s.Env,
			Cwd:          "/",
			Capabilities: caps,
			Rlimits: []ociRlimit{
				// The sentry enforces RLIMIT_NPROC and the guest sees EAGAIN;
				// a host pids limit alone would crash the whole sandbox.
				{Type: "RLIMIT_NPROC", Hard: uint64(s.Limits.MaxProcs), Soft: uint64(s.Limits.MaxProcs)},
				// 1,024 open files unless a program raises its own soft
				// limit (up to the hard one, as Go, Java and Chromium do),
				// as systemd and Docker give: programs that walk every
				// possible descriptor (x11vnc does for each new viewer)
				// spent 1.3 s of CPU doing it at 1,048,576.
				{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1024},
			},
		},
		// readonly=false: the overlay's upper layer takes the writes; the
		// image below is never written (and is a read-only mount on the host).
		Root:     ociRoot{Path: s.RootFS, Readonly: false},
		Hostname: "sandbox",
		Mounts: append([]ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// Runtime state (the agent's token and env) lives in memory, off
			// the writable layer, so a disk snapshot never carries it into
			// another sandbox; a full checkpoint keeps it with the rest.
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=65536k"}},
		}, bindMounts(s.Mounts)...),
		Linux: ociLinux{
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
				{Type: "network", Path: s.Netns},
			},
			Resources: ociResources{
				Memory: ociMemory{Limit: memory},
				CPU:    ociCPU{Shares: shares(s.Priority), Quota: int64(s.Limits.CPUs) * cpuPeriod, Period: cpuPeriod},
				// A backstop far above RLIMIT_NPROC: each guest process costs
				// about two host pids (sentry threads and systrap stubs).
				Pids: ociPids{Limit: int64(s.Limits.MaxProcs)*4 + 256},
			},
			CgroupsPath: "/" + cgroupParent + "/" + s.ID,
		},
	}
}

// weightOfShares is runsc's own mapping of cgroup v1 CPU shares
// (2-262144) to a v2 weight (1-10000), so that what spaced writes itself
// stands at the same priority as what runsc made from a spec's shares.
func weightOfShares(shares int) int {
	return 1 + (shares-2)*9999/262142
}

func shares(p runtime.Priority) uint64 {
	switch p {
	case runtime.PriorityBackground:
		return backgroundShares
	case runtime.PriorityUrgent:
		return urgentShares
	}
	return defaultShares
}

// bindMounts are the spec's volumes: host directories bound in, served by
// the gofer in runsc's shared file access mode (--file-access-mounts
// shared), which revalidates what the sentry caches against the host, so
// a sandbox sees changes made outside it (another sandbox, the volume
// content API) and a checkpoint holds none of their contents. nosuid and
// nodev: nothing a sandbox left in a volume is a set-user-ID program or a
// device anywhere.
func bindMounts(ms []runtime.Mount) []ociMount {
	out := make([]ociMount, 0, len(ms))
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, ociMount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}
	return out
}
