package redteam

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
)

// Checks of filesystem attempts.

func emptyList(k string) func(res) error {
	return func(r res) error {
		if v, ok := r[k].([]any); !ok || len(v) != 0 {
			return fmt.Errorf("%s = %v, want an empty list", k, r[k])
		}
		return nil
	}
}

func emptyStr(k string) func(res) error {
	return func(r res) error {
		if _, ok := r[k]; !ok || r.s(k) != "" {
			return fmt.Errorf("%s = %q, want empty", k, r.s(k))
		}
		return nil
	}
}

func isTrue(k string) func(res) error {
	return func(r res) error {
		if !r.b(k) {
			return fmt.Errorf("%s is %v, want true", k, r[k])
		}
		return nil
	}
}

// lacks: R[k] is present and holds none of the strings.
func lacks(k string, bad ...string) func(res) error {
	return func(r res) error {
		v := r.s(k)
		if _, ok := r[k]; !ok {
			return fmt.Errorf("%s missing", k)
		}
		for _, b := range bad {
			if strings.Contains(v, b) {
				return fmt.Errorf("%s contains %q", k, b)
			}
		}
		return nil
	}
}

// templateIntact: the host's template files are as they were (the check
// of the neighbour's copies is in guard).
func templateIntact(res) error { return env.canary.checkTemplate() }

// hostPathHints are strings that only a view of the host's filesystem
// would show.
var hostPathHints = []string{"/var/lib/space", "space-redteam-", "/usr/local/lib/space", "rt-canary-"}

// hostCgroupIntact is a host check: the sandbox's cgroup limits on the
// host are what spaced set (CPU quota, memory limit, pids limit), whatever
// the sandbox wrote to cgroup files it could see.
func hostCgroupIntact(t *testing.T, id string) error {
	want := map[string]string{}
	for _, dir := range gvisor.CgroupDirs(id) {
		for _, f := range []string{"cpu.cfs_quota_us", "cpu.max", "memory.limit_in_bytes", "memory.max", "pids.max"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				want[filepath.Join(dir, f)] = strings.TrimSpace(string(b))
			}
		}
	}
	sb, err := env.d.Client.GetSandbox(ctxFor(t), id)
	if err != nil {
		return err
	}
	if len(want) < 3 {
		return fmt.Errorf("found only %v of the sandbox's host cgroup limits", want)
	}
	for p, v := range want {
		var ok bool
		switch filepath.Base(p) {
		case "cpu.cfs_quota_us":
			ok = v == fmt.Sprint(sb.CPU*100000)
		case "cpu.max":
			ok = v == fmt.Sprintf("%d 100000", sb.CPU*100000)
		case "memory.limit_in_bytes", "memory.max":
			ok = v == fmt.Sprint(int64(sb.MemoryMB)<<20)
		case "pids.max":
			ok = v == fmt.Sprint(sb.MaxProcesses*4+256)
		}
		if !ok {
			return fmt.Errorf("host cgroup %s is %q, not what spaced set for %+v", p, v, sb)
		}
	}
	t.Logf("host cgroup limits unchanged: %v", want)
	return nil
}

const gvisorFS = "gVisor: the sandbox's file tree is the sentry's (template image read-only plus its own overlay); no host path is mounted in it"

func fsAttempts() []attempt {
	return []attempt{
		{id: "fs-host-canary-open", desc: "open the host's canary files by their host paths", stops: gvisorFS,
			control: "files planted inside at the same paths under /tmp/rt-twin are found",
			py:      "fs.host_canary_open", check: emptyList("seen")},
		{id: "fs-host-canary-search", desc: "search the sandbox's whole tree for the canaries' names", stops: gvisorFS,
			control: "the walk ends and finds a file planted in its last root",
			py:      "fs.host_canary_search", check: emptyList("found")},
		{id: "fs-proc1-root", desc: "reach the host through /proc/1/root (the agent's root)", stops: "the agent is not dumpable, so /proc/1/root is closed even to root; and in gVisor /proc/1 is the sandbox's own init, whose root is the sandbox root",
			py: "fs.proc1_root", check: all(emptyList("seen"), anyOf(isTrue("same"), isTrue("denied")))},
		{id: "fs-proc-self-root-dotdot", desc: "climb out through /proc/self/root/../../..", stops: gvisorFS,
			control: "the same climb finds files planted inside",
			py:      "fs.proc_self_root_dotdot", check: emptyList("seen")},
		{id: "fs-proc-links-walk", desc: "follow every /proc/<pid>/{root,cwd,exe,fd/*} link of every process looking for host paths", stops: "gVisor: every process listed is the sandbox's own; links name sandbox paths",
			control: "the walk reads this process's own links",
			py:      "fs.proc_links_walk", check: all(emptyList("seen"), lacks("links", hostPathHints...))},
		{id: "fs-proc1-exe-write", desc: "as root, append to the agent's binary through /proc/1/exe (to poison the template every sandbox shares)", stops: "the agent is not dumpable (EACCES); were it writable, the write would land in this sandbox's overlay: the host template and the neighbour's copy are checked",
			py: "fs.proc1_exe_write", check: all(refusedWith("err", perm...), templateIntact)},
		{id: "fs-template-overwrite", desc: "as root, append to shared template files (/usr/bin/python3, /etc/passwd, /bin/sh)", stops: "gVisor overlay: writes land in this sandbox's upper layer; the host template and the neighbour's copy are checked",
			control: "the appended bytes are in this sandbox's own copies",
			py:      "fs.template_overwrite", check: templateIntact},
		{id: "fs-proc-exe-target", desc: "read where /proc/self/exe and /proc/1/exe point (a host path would leak the host layout)", stops: gvisorFS + "; the agent's /proc/1/exe is closed (not dumpable)",
			py: "fs.proc_exe_target", check: all(isTrue("inside"), lacks("t", hostPathHints...))},
		{id: "fs-mountinfo", family: "fs-mount-table", desc: "read /proc/self/mountinfo for host paths", stops: "gVisor: mount table of the sentry's own VFS",
			control: "the table read holds the root mount",
			py:      "fs.mountinfo", check: lacks("mi", hostPathHints...)},
		{id: "fs-proc1-mounts", family: "fs-mount-table", desc: "read the agent's /proc/1/mounts and /proc/1/mountinfo for host paths", stops: "gVisor: mount table of the sentry's own VFS",
			control: "the table read holds the root mount",
			py:      "fs.proc1_mounts", check: lacks("mi", hostPathHints...)},
		{id: "fs-proc-kcore", family: "fs-proc-kernel-files", desc: "read host kernel memory through /proc/kcore", stops: "gVisor: no /proc/kcore (ENOENT)",
			control: "/proc/self/stat opens", py: "fs.proc_file", args: map[string]any{"path": "/proc/kcore"}, check: refusedWith("err", absent...)},
		{id: "fs-proc-kmsg", family: "fs-proc-kernel-files", desc: "read the host kernel log through /proc/kmsg", stops: "gVisor: no /proc/kmsg (ENOENT)",
			control: "/proc/self/stat opens", py: "fs.proc_file", args: map[string]any{"path": "/proc/kmsg"}, check: refusedWith("err", absent...)},
		{id: "fs-proc-kallsyms", family: "fs-proc-kernel-files", desc: "read kernel symbol addresses from /proc/kallsyms", stops: "gVisor: no /proc/kallsyms (ENOENT)",
			control: "/proc/self/stat opens", py: "fs.proc_file", args: map[string]any{"path": "/proc/kallsyms"}, check: refusedWith("err", absent...)},
		{id: "fs-proc-sysrq", family: "fs-proc-sys-write", desc: "write to /proc/sysrq-trigger (h, harmless on a host that honoured it)", stops: "gVisor: /proc/sysrq-trigger is an inert stub of the sentry; writes fail (EIO)",
			py: "fs.proc_write", args: map[string]any{"path": "/proc/sysrq-trigger", "value": "h"}, check: refusedWith("err", writeRefused...)},
		{id: "fs-proc-core-pattern", family: "fs-proc-sys-write", desc: "set /proc/sys/kernel/core_pattern to a pipe (host code execution on a crash)", stops: "gVisor: no such file in the sentry's /proc/sys, and none can be made (EPERM); the host's value is checked after",
			py: "fs.proc_write", args: map[string]any{"path": "/proc/sys/kernel/core_pattern", "value": "|/tmp/pwn"}, check: all(refusedWith("err", writeRefused...), isFalse("changed"))},
		{id: "fs-proc-modprobe", family: "fs-proc-sys-write", desc: "set /proc/sys/kernel/modprobe", stops: "gVisor: no such file, and none can be made (EPERM)",
			py: "fs.proc_write", args: map[string]any{"path": "/proc/sys/kernel/modprobe", "value": "/tmp/pwn"}, check: all(refusedWith("err", writeRefused...), isFalse("changed"))},
		{id: "fs-proc-sys-vm", family: "fs-proc-sys-write", desc: "change /proc/sys/vm/overcommit_memory and drop_caches", stops: "gVisor: /proc/sys is the sentry's; the values read back unchanged and the host's is checked after",
			py: "fs.proc_sys_vm", check: all(allRefusedWith("errs", writeRefused...), emptyList("changed"))},
		{id: "fs-proc-sys-hostname", family: "fs-proc-sys-write", desc: "write the hostname through /proc/sys/kernel/hostname", stops: "gVisor: the sentry's UTS namespace, its file not writable (EIO); the hostname reads back unchanged and the host's is checked after",
			py: "fs.proc_sys_hostname", check: all(refusedWith("err", writeRefused...), isFalse("changed"), equals("also", "sandbox"))},
		{id: "fs-sys-kernel", desc: "reach debugfs/tracefs/securityfs under /sys/kernel", stops: "gVisor: a minimal sysfs without them",
			control: "/sys/kernel is there to look in", py: "fs.sys_kernel", check: emptyList("found")},
		{id: "fs-sys-uevent-helper", desc: "set /sys/kernel/uevent_helper (host code execution on a uevent)", stops: "gVisor: no such file, and sysfs is read-only (EROFS)",
			py: "fs.proc_write", args: map[string]any{"path": "/sys/kernel/uevent_helper", "value": "/tmp/pwn"}, check: all(refusedWith("err", writeRefused...), isFalse("changed"))},
		{id: "fs-sys-cgroup-write", desc: "raise limits and move processes by writing every file under /sys/fs/cgroup, and under cgroup v1 hierarchies mounted in a new user+mount namespace (memory limit, CPU quota, cpuset, devices, release_agent)", stops: "gVisor: /sys/fs/cgroup is empty, and the cgroupfs a user namespace may mount is the sentry's own: the writes there take, but the sandbox's host cgroup (CPU quota, memory and pids limits) reads back as spaced set it",
			control: "the sentry's cgroupfs mounts in a user namespace (so the writes were made)",
			py:      "fs.sys_cgroup_write", check: nonEmpty("mounted"), host: hostCgroupIntact},
		{id: "fs-sys-class-net", desc: "list host interfaces through /sys/class/net, if_nameindex and /proc/net/dev", stops: "gVisor: netstack shows only the sandbox's lo and eth0",
			control: "if_nameindex lists eth0", py: "fs.sys_class_net", check: emptyList("extra")},
		{id: "fs-sys-firmware", desc: "read firmware tables (DMI, EFI variables, ACPI)", stops: "gVisor: an empty /sys/firmware",
			control: "/sys/firmware is there to look in",
			py:      "fs.exists_any", args: map[string]any{"paths": []string{"/sys/firmware/efi", "/sys/firmware/dmi/tables/DMI", "/sys/firmware/acpi/tables", "/sys/class/dmi/id/product_uuid"}, "parent": "/sys/firmware"}, check: emptyList("found")},
		{id: "fs-sys-block", desc: "find host disks under /sys/block and /sys/dev/block", stops: "gVisor: no block devices",
			control: "/sys/block is there to look in",
			py:      "fs.exists_any", args: map[string]any{"paths": []string{"/sys/block/sda", "/sys/block/vda", "/sys/block/nvme0n1", "/sys/block/xvda", "/sys/dev/block/8:0", "/sys/dev/block/253:0"}, "parent": "/sys/block"}, check: emptyList("found")},
		{id: "fs-dev-mem", family: "fs-dev-open", desc: "open /dev/mem, /dev/kmem and /dev/port", stops: "gVisor: no such devices (ENOENT)",
			control: "/dev/null opens", py: "fs.open_devices", args: map[string]any{"paths": []string{"/dev/mem", "/dev/kmem", "/dev/port"}}, check: allRefusedWith("errs", absent...)},
		{id: "fs-dev-disks", family: "fs-dev-open", desc: "open host disks (/dev/sda, vda, nvme0n1, xvda, loop0, dm-0, mapper/control)", stops: "gVisor: no block devices (ENOENT)",
			control: "/dev/null opens", py: "fs.open_devices", args: map[string]any{"paths": []string{"/dev/sda", "/dev/vda", "/dev/nvme0n1", "/dev/xvda", "/dev/loop0", "/dev/dm-0", "/dev/mapper/control"}}, check: allRefusedWith("errs", absent...)},
		{id: "fs-dev-scan", desc: "scan /dev for block devices and unexpected character devices", stops: "gVisor: a fixed, minimal /dev",
			control: "the scan sees /dev/null as a character device", py: "fs.dev_scan", check: emptyList("odd")},
		{id: "fs-dev-kvm-vsock", family: "fs-dev-open", desc: "open /dev/kvm, /dev/vsock, /dev/vhost-net, /dev/vhost-vsock", stops: "gVisor: no such devices (ENOENT)",
			control: "/dev/null opens for writing", py: "fs.open_devices", args: map[string]any{"paths": []string{"/dev/kvm", "/dev/vsock", "/dev/vhost-net", "/dev/vhost-vsock"}, "flags": 2}, check: allRefusedWith("errs", absent...)},
		{id: "fs-mknod-block", family: "fs-mknod", desc: "mknod a block device 8:0 (sda) and read it", stops: "gVisor: the node is made but no host device is behind it: opening it fails (ENXIO)",
			control: "mknod and open of char 1:3 give the sentry's null device",
			py:      "fs.mknod_device", args: map[string]any{"kind": "block", "major": 8, "minor": 0}, check: refusedWith("open", "ENXIO", "ENODEV", "EPERM", "EACCES")},
		{id: "fs-mknod-mem", family: "fs-mknod", desc: "mknod /dev/mem (char 1:1) and read it", stops: "gVisor: the node is made but no host device is behind it: opening it fails (ENXIO)",
			control: "mknod and open of char 1:3 give the sentry's null device",
			py:      "fs.mknod_device", args: map[string]any{"kind": "char", "major": 1, "minor": 1}, check: refusedWith("open", "ENXIO", "ENODEV", "EPERM", "EACCES")},
		{id: "fs-mknod-kmsg", family: "fs-mknod", desc: "mknod /dev/kmsg (char 1:11) and read it", stops: "gVisor: the node is made but no host device is behind it: opening it fails (ENXIO)",
			control: "mknod and open of char 1:3 give the sentry's null device",
			py:      "fs.mknod_device", args: map[string]any{"kind": "char", "major": 1, "minor": 11}, check: refusedWith("open", "ENXIO", "ENODEV", "EPERM", "EACCES")},
		{id: "fs-mount-blockdev", family: "fs-mount-root", desc: "mount a host disk (/dev/vda, ext4) at /mnt", stops: "no CAP_SYS_ADMIN (EPERM); no such device",
			py: "fs.root_mount", args: map[string]any{"src": "/dev/vda", "fs": "ext4", "userns_control": false}, check: refusedWith("err", "EPERM")},
		{id: "fs-mount-proc", family: "fs-mount-root", desc: "mount a fresh procfs as root", stops: "no CAP_SYS_ADMIN (EPERM)",
			control: "the same mount works in a new user+mount namespace",
			py:      "fs.root_mount", args: map[string]any{"src": "proc", "fs": "proc"}, check: refusedWith("err", "EPERM")},
		{id: "fs-mount-bind-root", family: "fs-mount-root", desc: "bind-mount / elsewhere as root", stops: "no CAP_SYS_ADMIN (EPERM)",
			control: "the same mount works in a new user+mount namespace",
			py:      "fs.root_mount", args: map[string]any{"src": "/", "fs": nil, "flags": 4096 | 16384}, check: refusedWith("err", "EPERM")},
		{id: "fs-mount-9p", desc: "mount 9p over an inherited fd (talk to the gofer directly)", stops: "no CAP_SYS_ADMIN (EPERM); the gofer channel is not a guest fd",
			py: "fs.root_mount", args: map[string]any{"src": "none", "fs": "9p", "data": "trans=fd,rfdno=3,wfdno=3", "userns_control": false}, check: refusedWith("err", "EPERM")},
		{id: "fs-userns-proc", desc: "in a new user+mount namespace, mount procfs and look for host processes (and in a new PID namespace too)", stops: "gVisor: namespaces are the sentry's; every process is the sandbox's",
			control: "the fresh procfs lists the sandbox's own agent",
			py:      "fs.userns_proc", check: all(emptyStr("err"), lacks("comms", "runsc", "spaced", "systemd", "sshd", "containerd"), lacks("pidns", "runsc", "spaced", "systemd"))},
		{id: "fs-userns-sysfs", desc: "in a new user+mount namespace, mount sysfs and look for the host's network interfaces in it", stops: "gVisor: sysfs of the sentry",
			control: "the fresh sysfs mounts and has entries", py: "fs.userns_sysfs", check: emptyList("host_ifs")},
		{id: "fs-userns-bind-root", desc: "in a new user+mount namespace, bind-mount / and look for the host canaries", stops: gvisorFS,
			control: "the bind mount shows files planted inside", py: "fs.userns_bind_root", check: all(emptyStr("err"), emptyList("seen"))},
		{id: "fs-userns-tmpfs-overmount", desc: "in a new user+mount namespace, mount tmpfs over /proc and /etc, then look for host files", stops: gvisorFS,
			control: "the tmpfs covers /etc", py: "fs.userns_tmpfs_overmount", check: emptyList("seen")},
		{id: "fs-chroot-escape", family: "fs-chroot", desc: "classic chroot escape: chroot into a subdirectory, fchdir to an fd kept outside, chdir .. 64 times, chroot .", stops: gvisorFS + " (the climb ends in an empty root above the sandbox's, still inside the sentry)",
			control: "the fd kept outside leads out of the jail to the sandbox's root",
			py:      "fs.chroot_escape", check: all(emptyList("seen"), lacks("root", "rt-canary"))},
		{id: "fs-chroot-userns-escape", family: "fs-chroot", desc: "chroot escape from inside a new user namespace (with all capabilities there)", stops: gvisorFS,
			control: "the fd kept outside leads out of the jail to the sandbox's root",
			py:      "fs.chroot_escape", args: map[string]any{"new_userns": true}, check: all(emptyStr("userns"), emptyList("seen"))},
		{id: "fs-pivot-root", desc: "pivot_root in a new user+mount namespace and look through the old root", stops: gvisorFS,
			control: "pivot_root works and the old root shows files planted inside", py: "fs.pivot_root", check: emptyList("seen")},
		{id: "fs-open-by-handle", family: "fs-handles", desc: "open_by_handle_at with a forged handle (the 'shocker' escape)", stops: "gVisor does not implement it (EOPNOTSUPP); no CAP_DAC_READ_SEARCH",
			py: "fs.open_by_handle", check: refusedWith("err", "EOPNOTSUPP", "ENOTSUP", "ENOSYS", "EPERM")},
		{id: "fs-name-to-handle", family: "fs-handles", desc: "name_to_handle_at to learn host inode handles", stops: "gVisor: not implemented (EOPNOTSUPP)",
			py: "fs.name_to_handle", check: refusedWith("err", "EOPNOTSUPP", "ENOTSUP", "ENOSYS")},
		{id: "fs-agent-mem", desc: "open the agent's memory /proc/1/mem for writing", stops: "the agent is not dumpable and root has no CAP_SYS_PTRACE (EACCES)",
			control: "/proc/self/mem opens for writing", py: "fs.agent_mem", check: refusedWith("err", perm...)},
	}
}

// fsUserAttempts run as the unprivileged default user.
func fsUserAttempts() []attempt {
	return []attempt{
		{id: "fs-user-agent-state", desc: "as the default user, read the agent's persisted state (it holds the sandbox's access token)", stops: "file mode 0600 root in /run/space-agent (EACCES)",
			control: "the user reads a file of its own", py: "fs.user_agent_state", check: refusedWith("err", perm...)},
		{id: "fs-user-agent-environ", desc: "as the default user, read the agent's environment (/proc/1/environ)", stops: "ptrace access check: another user's process (EACCES)",
			control: "/proc/self/environ reads", py: "fs.user_agent_environ", check: refusedWith("err", perm...)},
		{id: "fs-user-dirty-pipe", desc: "Dirty Pipe (CVE-2022-0847): splice a root-owned file into a pipe and overwrite it through the pipe", stops: "gVisor: its own pipe implementation; the file's content is checked",
			control: "the splice and the write into the pipe both work", py: "fs.user_dirty_pipe", check: isFalse("changed")},
		{id: "fs-user-dirty-cow", desc: "Dirty COW: write a read-only private mapping of a root-owned file through /proc/self/mem", stops: "gVisor: copy-on-write in the sentry's memory manager; the file's content is checked",
			control: "the writes land in the process's private copy of the page", py: "fs.user_dirty_cow", check: isFalse("changed")},
		{id: "fs-user-write-template", desc: "as the default user, overwrite files of the shared template image (/usr/bin/python3, /etc/passwd)", stops: "file permissions (EACCES); writes of root would land in the sandbox's own overlay only",
			control: "the user writes a file in its home", py: "fs.user_write_template", check: allRefusedWith("errs", perm...)},
	}
}

func TestFilesystem(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	runGroup(t, d, sb.ID, "root", fsAttempts())
	runGroup(t, d, sb.ID, "user", fsUserAttempts())
}
