package redteam

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

const (
	noCap      = "no such capability in the sandbox (spec.go: Docker's default set without CAP_NET_RAW), enforced by the gVisor sentry"
	sentryOnly = "gVisor sentry: the system call is served (or refused) by the user-space kernel and never reaches the host kernel; seccomp behind it"
	notImpl    = "gVisor sentry: not implemented (ENOSYS or similar)"
)

// hostRelease is the host kernel's release, which no answer inside may show.
func hostRelease() string {
	var u syscall.Utsname
	syscall.Uname(&u)
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// dangerousCaps are capability bits no process in a sandbox may hold.
var dangerousCaps = map[int]string{2: "DAC_READ_SEARCH", 12: "NET_ADMIN", 13: "NET_RAW", 16: "SYS_MODULE", 17: "SYS_RAWIO",
	19: "SYS_PTRACE", 21: "SYS_ADMIN", 22: "SYS_BOOT", 23: "SYS_NICE", 24: "SYS_RESOURCE", 25: "SYS_TIME", 33: "MAC_ADMIN", 38: "PERFMON", 39: "BPF"}

func noDangerousCaps(r res) error {
	for _, k := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"} {
		var v uint64
		if _, err := fmt.Sscanf(r.s(k), "%x", &v); err != nil {
			return fmt.Errorf("%s = %q", k, r.s(k))
		}
		for bit, name := range dangerousCaps {
			if v&(1<<bit) != 0 {
				return fmt.Errorf("%s holds CAP_%s", k, name)
			}
		}
	}
	return nil
}

func socketFamilies(fams ...string) string {
	var b strings.Builder
	b.WriteString("R['errs'] = {}\n")
	for _, f := range fams {
		name, num, _ := strings.Cut(f, "=")
		fmt.Fprintf(&b, "for ty in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET):\n    s, e = tryio(socket.socket, %s, ty, 0)\n    if s: s.close()\n    R['errs']['%s/%%d' %% ty] = e\n", num, name)
	}
	return b.String()
}

func kernelAttempts() []attempt {
	return []attempt{
		// ptrace and friends against the agent (PID 1) and a sibling of another user.
		{id: "kernel-ptrace-agent", desc: "PTRACE_ATTACH to the agent (PID 1) as root", stops: noCap + " (CAP_SYS_PTRACE)", py: call(101, "16", "1", "0", "0"), check: failed},
		{id: "kernel-ptrace-seize-agent", desc: "PTRACE_SEIZE of the agent as root", stops: noCap + " (CAP_SYS_PTRACE)", py: call(101, "0x4206", "1", "0", "0"), check: failed},
		{id: "kernel-ptrace-sibling", desc: "PTRACE_ATTACH as root to a sibling process of the default user (sleep 7777)", stops: noCap + " (CAP_SYS_PTRACE)",
			py: "pid = [int(p) for p in os.listdir('/proc') if p.isdigit() and '7777' in readf('/proc/%s/cmdline' % p)][0]\n" + call(101, "16", "pid", "0", "0"), check: failed},
		{id: "kernel-process-vm-readv-agent", desc: "read the agent's memory with process_vm_readv", stops: noCap + " (CAP_SYS_PTRACE)",
			py: "buf = ctypes.create_string_buffer(64)\nloc = struct.pack('QQ', ctypes.addressof(buf), 64)\nrem = struct.pack('QQ', 0x400000, 64)\n" + call(310, "1", "loc", "1", "rem", "1", "0"), check: failed},
		{id: "kernel-process-vm-writev-agent", desc: "write the agent's memory with process_vm_writev", stops: noCap + " (CAP_SYS_PTRACE)",
			py: "buf = ctypes.create_string_buffer(64)\nloc = struct.pack('QQ', ctypes.addressof(buf), 64)\nrem = struct.pack('QQ', 0x400000, 64)\n" + call(311, "1", "loc", "1", "rem", "1", "0"), check: failed},
		{id: "kernel-pidfd-getfd-agent", desc: "steal the agent's file descriptors (its listening socket) with pidfd_getfd", stops: noCap + " (CAP_SYS_PTRACE)",
			py: "pfd, e = sc(434, 1, 0)\nR['err'] = e\nif pfd >= 0:\n    for n in range(3, 12):\n        r, e = sc(438, pfd, n, 0)\n        if r >= 0: R['err'] = ''; break\n        R['err'] = e", check: failed},
		{id: "kernel-kcmp-agent", desc: "compare kernel objects with the agent (kcmp)", stops: notImpl + "; " + noCap, py: call(312, "1", "os.getpid()", "0", "0", "0"), check: failed},
		{id: "kernel-process-madvise-agent", desc: "process_madvise on the agent's memory", stops: notImpl + "; " + noCap,
			py: "pfd, e = sc(434, 1, 0)\niov = struct.pack('QQ', 0x400000, 4096)\n" + call(440, "pfd", "iov", "1", "21", "0"), check: failed},
		{id: "kernel-move-pages-agent", desc: "move_pages and migrate_pages of the agent", stops: notImpl + "; " + noCap,
			py: "pages = (ctypes.c_void_p * 1)(0x400000)\nst = (ctypes.c_int * 1)()\nmask = ctypes.c_ulong(1)\nR['errs'] = {'move_pages': sc(279, 1, 1, pages, None, st, 0)[1], 'migrate_pages': sc(256, 1, 64, ctypes.byref(mask), ctypes.byref(mask))[1]}", check: allFailed("errs")},
		// Capabilities and namespaces.
		{id: "kernel-caps", desc: "read root's capability sets for dangerous capabilities", stops: "spec.go's capability list",
			py: "for l in readf('/proc/self/status').splitlines():\n    k, _, v = l.partition(':')\n    if k.startswith('Cap'): R[k] = v.strip()", check: noDangerousCaps},
		{id: "kernel-capset-raise", desc: "capset every capability bit", stops: "gVisor sentry: capset cannot exceed the bounding set",
			py: "hdr = struct.pack('Ii', 0x20080522, 0)\ndata = struct.pack('6I', *([0xffffffff] * 6))\n" + call(126, "hdr", "data"), check: failed},
		{id: "kernel-ambient-raise", desc: "raise CAP_SYS_ADMIN into the ambient set", stops: "not in the permitted/bounding set", py: call(157, "47", "2", "21", "0", "0"), check: failed},
		{id: "kernel-unshare-all", desc: "unshare mount, UTS, IPC, net, PID and cgroup namespaces as root without a user namespace", stops: noCap + " (CAP_SYS_ADMIN)",
			py: call(272, "0x20000 | 0x4000000 | 0x8000000 | 0x40000000 | 0x20000000 | 0x2000000"), check: failed},
		{id: "kernel-setns-agent", desc: "setns into the agent's namespaces", stops: noCap + " (CAP_SYS_ADMIN)",
			py: "R['errs'] = {}\nfor n in ('mnt', 'net', 'pid', 'uts', 'ipc', 'user', 'cgroup'):\n    fd, e = tryio(os.open, '/proc/1/ns/' + n, os.O_RDONLY)\n    R['errs'][n] = e or sc(308, fd, 0)[1]", check: allFailed("errs")},
		{id: "kernel-userns-host-time", desc: "in a new user namespace (all capabilities there), set the clock and the hostname of the parent", stops: "gVisor sentry: capabilities in a child user namespace do not cover the parent's time or UTS namespace",
			py: "R['ns'] = userns()\ntv = struct.pack('qq', int(time.time()) + 7200, 0)\nR['errs'] = {'settimeofday': sc(164, tv, None)[1], 'clock_settime': sc(227, 0, tv)[1], 'sethostname': sc(170, cstr('pwned'), 5)[1]}", check: allFailed("errs")},
		{id: "kernel-timens-realtime", desc: "in a new time namespace, set CLOCK_REALTIME (time namespaces offset only the monotonic clocks)", stops: noCap + " (CAP_SYS_TIME); host clock checked after",
			py: "R['ns'] = sc(272, 0x80)[1]\n" + call(227, "0", "struct.pack('qq', int(time.time()) + 7200, 0)"), check: failed},
		{id: "kernel-cgroup-release-agent", desc: "CVE-2022-0492: in a new user+mount+cgroup namespace mount cgroup v1 and set release_agent", stops: "gVisor sentry: cgroupfs of its own, no release_agent run on the host",
			py: "e = userns(0x20000 | 0x2000000)\nos.makedirs('/tmp/rtcg', exist_ok=True)\nR['err'] = e or mount('cgroup', '/tmp/rtcg', 'cgroup', 0, 'memory') or writeerr('/tmp/rtcg/release_agent', '/tmp/pwn')", check: failed},
		// Kernel surfaces with a history of escapes.
		{id: "kernel-io-uring", desc: "io_uring_setup", stops: "gVisor: io_uring off unless --iouring", py: "p = ctypes.create_string_buffer(120)\n" + call(425, "8", "p"), check: failed},
		{id: "kernel-io-uring-sqpoll", desc: "io_uring_setup with a kernel polling thread (IORING_SETUP_SQPOLL)", stops: "gVisor: io_uring off unless --iouring", py: "p = ctypes.create_string_buffer(struct.pack('II', 0, 2) + b'\\0' * 112, 120)\n" + call(425, "8", "p"), check: failed},
		{id: "kernel-userfaultfd", desc: "userfaultfd (the race helper of many kernel exploits), also through /dev/userfaultfd", stops: notImpl,
			py: "R['errs'] = {'syscall': sc(323, 0)[1], 'user-mode': sc(323, 1)[1], 'dev': openerr('/dev/userfaultfd', os.O_RDWR)}", check: allFailed("errs")},
		{id: "kernel-bpf-map", desc: "bpf(BPF_MAP_CREATE)", stops: notImpl + "; " + noCap + " (CAP_BPF)",
			py: "a = ctypes.create_string_buffer(struct.pack('IIII', 1, 4, 4, 1) + b'\\0' * 112, 128)\n" + call(321, "0", "a", "128"), check: failed},
		{id: "kernel-bpf-prog", desc: "bpf(BPF_PROG_LOAD) of a socket filter", stops: notImpl + "; " + noCap + " (CAP_BPF)",
			py: "insns = ctypes.create_string_buffer(b'\\xb7\\0\\0\\0\\0\\0\\0\\0\\x95\\0\\0\\0\\0\\0\\0\\0', 16)\nlic = ctypes.create_string_buffer(b'GPL')\na = ctypes.create_string_buffer(struct.pack('IIQQ', 1, 2, ctypes.addressof(insns), ctypes.addressof(lic)) + b'\\0' * 104, 128)\n" + call(321, "5", "a", "128"), check: failed},
		{id: "kernel-perf-event", desc: "perf_event_open for this process and system-wide", stops: notImpl + "; " + noCap + " (CAP_PERFMON)",
			py: "a = ctypes.create_string_buffer(struct.pack('IIQ', 0, 128, 0) + b'\\0' * 112, 128)\nR['errs'] = {'self': sc(298, a, 0, -1, -1, 0)[1], 'cpu0': sc(298, a, -1, 0, -1, 0)[1]}", check: allFailed("errs")},
		{id: "kernel-keyctl", desc: "add_key, request_key and keyctl read of the user keyring; /proc/keys", stops: notImpl + " (keys are the sentry's own)",
			py: "R['errs'] = {'add_key': sc(248, cstr('user'), cstr('rt'), cstr('data'), 4, -3)[1], 'request_key': sc(249, cstr('user'), cstr('rt'), None, 0)[1], 'read': sc(250, 11, -4, None, 0)[1], '/proc/keys': openerr('/proc/keys')}", check: allFailed("errs")},
		{id: "kernel-init-module", desc: "init_module with an ELF header", stops: notImpl + "; " + noCap + " (CAP_SYS_MODULE)",
			py: "b = ctypes.create_string_buffer(b'\\x7fELF' + b'\\0' * 60, 64)\n" + call(175, "b", "64", "cstr('')"), check: failed},
		{id: "kernel-finit-module", desc: "finit_module of a file", stops: notImpl + "; " + noCap + " (CAP_SYS_MODULE)",
			py: "fd = os.open('/usr/bin/true', os.O_RDONLY)\n" + call(313, "fd", "cstr('')", "0"), check: failed},
		{id: "kernel-delete-module", desc: "delete_module of a host module", stops: notImpl + "; " + noCap, py: call(176, "cstr('ext4')", "0"), check: failed},
		{id: "kernel-kexec", desc: "kexec_load and kexec_file_load", stops: notImpl + "; " + noCap + " (CAP_SYS_BOOT)",
			py: "fd = os.open('/usr/bin/true', os.O_RDONLY)\nR['errs'] = {'kexec_load': sc(246, 0, 0, None, 0)[1], 'kexec_file_load': sc(320, fd, fd, 1, cstr(''), 2)[1]}", check: allFailed("errs")},
		{id: "kernel-reboot", desc: "reboot(LINUX_REBOOT_CMD_CAD_OFF) as root", stops: noCap + " (CAP_SYS_BOOT)", py: call(169, "0xfee1dead", "672274793", "0", "None"), check: failed},
		{id: "kernel-swapon", desc: "swapon a file", stops: notImpl + "; " + noCap,
			py: "open('/tmp/rtswap', 'wb').write(b'\\0' * 65536)\n" + call(167, "cstr('/tmp/rtswap')", "0"), check: failed},
		{id: "kernel-acct", desc: "process accounting to a file (acct)", stops: notImpl + "; " + noCap, py: call(163, "cstr('/tmp/rtacct')"), check: failed},
		{id: "kernel-iopl", desc: "iopl(3) and ioperm on port 0x80 (raw I/O ports)", stops: notImpl + "; " + noCap + " (CAP_SYS_RAWIO)",
			py: "R['errs'] = {'iopl': sc(172, 3)[1], 'ioperm': sc(173, 0x80, 1, 1)[1]}", check: allFailed("errs")},
		{id: "kernel-modify-ldt", desc: "modify_ldt (historic entry point of privilege escalations)", stops: notImpl,
			py: "d = ctypes.create_string_buffer(16)\n" + call(154, "1", "d", "16"), check: failed},
		{id: "kernel-syslog", desc: "read the kernel log with syslog(READ_ALL) and look for the host's kernel", stops: "gVisor sentry: a synthetic log of its own",
			py: "b = ctypes.create_string_buffer(1 << 16)\nn, R['err'] = sc(103, 3, b, 1 << 16)\nR['log'] = b.raw[:max(n, 0)].decode('latin-1')", check: lacks("log", hostRelease())},
		{id: "kernel-uname", desc: "uname and /proc/version for the host's kernel release", stops: "gVisor sentry reports its own version",
			py: "R['v'] = ' '.join(os.uname()) + readf('/proc/version')", check: lacks("v", hostRelease())},
		{id: "kernel-sethostname", desc: "sethostname and setdomainname as root", stops: noCap + " (CAP_SYS_ADMIN); host hostname checked after",
			py: "R['errs'] = {'sethostname': sc(170, cstr('pwned'), 5)[1], 'setdomainname': sc(171, cstr('pwned'), 5)[1]}", check: allFailed("errs")},
		{id: "kernel-settimeofday", desc: "settimeofday two hours ahead", stops: noCap + " (CAP_SYS_TIME); host clock checked after",
			py: call(164, "struct.pack('qq', int(time.time()) + 7200, 0)", "None"), check: failed},
		{id: "kernel-clock-settime", desc: "clock_settime(CLOCK_REALTIME) two hours ahead", stops: noCap + " (CAP_SYS_TIME); host clock checked after",
			py: call(227, "0", "struct.pack('qq', int(time.time()) + 7200, 0)"), check: failed},
		{id: "kernel-adjtimex", desc: "adjtimex and clock_adjtime with ADJ_OFFSET/ADJ_FREQUENCY", stops: noCap + " (CAP_SYS_TIME)",
			py: "tx = struct.pack('Iiq', 1 | 2, 0, 500000) + b'\\0' * 192\nR['errs'] = {'adjtimex': sc(159, tx)[1], 'clock_adjtime': sc(305, 0, tx)[1]}", check: allFailed("errs")},
		{id: "kernel-sched-fifo", desc: "SCHED_FIFO priority 99 (starve the host's CPUs)", stops: noCap + " (CAP_SYS_NICE); the sentry schedules on its own threads",
			py: call(144, "0", "1", "struct.pack('i', 99)"), check: failed},
		{id: "kernel-rlimit-raise", desc: "raise the hard RLIMIT_NPROC and RLIMIT_NOFILE", stops: noCap + " (CAP_SYS_RESOURCE)",
			py: "import resource\nR['errs'] = {}\nfor k in (resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE):\n    s, h = resource.getrlimit(k)\n    R['errs'][str(k)] = sc(302, 0, k, struct.pack('QQ', h + 1, h + 1), None)[1]", check: allFailed("errs")},
		{id: "kernel-prctl-set-mm", desc: "prctl(PR_SET_MM) to rewrite the memory map descriptors", stops: noCap + " (CAP_SYS_RESOURCE)", py: call(157, "35", "1", "0x400000", "0", "0"), check: failed},
		// Sockets.
		{id: "kernel-raw-socket", desc: "raw IPv4 socket (spoofed packets)", stops: noCap + " (CAP_NET_RAW)", py: "R['err'] = tryio(socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)[1]", check: failed},
		{id: "kernel-raw6-socket", desc: "raw IPv6 socket", stops: noCap + " (CAP_NET_RAW)", py: "R['err'] = tryio(socket.socket, socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)[1]", check: failed},
		{id: "kernel-packet-socket", desc: "AF_PACKET socket (sniff and inject frames on eth0)", stops: noCap + " (CAP_NET_RAW)", py: "R['errs'] = {str(t): tryio(socket.socket, 17, t, 0x0300)[1] for t in (socket.SOCK_RAW, socket.SOCK_DGRAM)}", check: allFailed("errs")},
		{id: "kernel-af-alg", desc: "AF_ALG kernel crypto sockets", stops: notImpl, py: socketFamilies("alg=38"), check: allFailed("errs")},
		{id: "kernel-af-vsock", desc: "AF_VSOCK sockets (hypervisor channel)", stops: notImpl, py: socketFamilies("vsock=40"), check: allFailed("errs")},
		{id: "kernel-af-xdp-key", desc: "AF_XDP and AF_KEY sockets", stops: notImpl, py: socketFamilies("xdp=44", "key=15"), check: allFailed("errs")},
		{id: "kernel-af-tipc-rds", desc: "AF_TIPC and AF_RDS sockets", stops: notImpl, py: socketFamilies("tipc=30", "rds=21"), check: allFailed("errs")},
		{id: "kernel-af-can-bt", desc: "AF_CAN and AF_BLUETOOTH sockets", stops: notImpl, py: socketFamilies("can=29", "bluetooth=31"), check: allFailed("errs")},
		{id: "kernel-af-obsolete", desc: "obsolete families: AX25, IPX, AppleTalk, X25, LLC, PPPoX, ATM, NFC, SMC, MCTP, QIPCRTR, PHONET, IEEE802154, CAIF, ISDN", stops: notImpl,
			py: socketFamilies("ax25=3", "ipx=4", "appletalk=5", "x25=9", "atmpvc=8", "llc=26", "pppox=24", "nfc=39", "smc=43", "mctp=45", "qipcrtr=42", "phonet=35", "ieee802154=36", "caif=37", "isdn=34"), check: allFailed("errs")},
		{id: "kernel-netlink-families", desc: "netlink families beyond route: audit, uevent, netfilter, xfrm, generic, connector, crypto", stops: "gVisor netstack: only NETLINK_ROUTE (and NETLINK_KOBJECT_UEVENT as a stub) exist",
			py: "R['errs'] = {}\nfor n, p in (('audit', 9), ('netfilter', 12), ('xfrm', 6), ('generic', 16), ('connector', 11), ('crypto', 21), ('scsi', 7), ('rdma', 20)):\n    s, e = tryio(socket.socket, socket.AF_NETLINK, socket.SOCK_RAW, p)\n    if s: s.close()\n    R['errs'][n] = e", check: allFailed("errs")},
		{id: "kernel-ifconfig", desc: "change eth0's address, flags, MAC and MTU with ioctls (take a neighbour's address)", stops: noCap + " (CAP_NET_ADMIN)",
			py: "import fcntl\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nname = b'eth0'.ljust(16, b'\\0')\naddr = struct.pack('HH4s', socket.AF_INET, 0, socket.inet_aton('10.245.0.2')).ljust(24, b'\\0')\nR['errs'] = {}\nfor n, req, arg in (('addr', 0x8916, name + addr), ('flags', 0x8914, name + struct.pack('H', 0).ljust(24, b'\\0')), ('mac', 0x8924, name + struct.pack('H', 1).ljust(24, b'\\x41')), ('mtu', 0x8922, name + struct.pack('i', 9000).ljust(24, b'\\0'))):\n    R['errs'][n] = tryio(fcntl.ioctl, s, req, arg)[1]", check: allFailed("errs")},
		{id: "kernel-tun", desc: "create a TUN interface through /dev/net/tun", stops: noCap + " (CAP_NET_ADMIN)",
			py: "import fcntl\nfd, e = tryio(os.open, '/dev/net/tun', os.O_RDWR)\nR['err'] = e or tryio(fcntl.ioctl, fd, 0x400454ca, b'rt0'.ljust(16, b'\\0') + struct.pack('H', 1).ljust(24, b'\\0'))[1]", check: failed},
		// Newer and obsolete system calls.
		{id: "kernel-new-mount-api", desc: "fsopen, fspick, open_tree, move_mount and mount_setattr as root", stops: notImpl + "; " + noCap,
			py: "attr = ctypes.create_string_buffer(32)\nR['errs'] = {'fsopen': sc(430, cstr('tmpfs'), 0)[1], 'fspick': sc(433, -100, cstr('/'), 0)[1], 'open_tree': sc(428, -100, cstr('/'), 1)[1], 'move_mount': sc(429, -100, cstr('/tmp'), -100, cstr('/mnt'), 0)[1], 'mount_setattr': sc(442, -100, cstr('/'), 0, attr, 32)[1]}", check: allFailed("errs")},
		{id: "kernel-obsolete-syscalls", desc: "uselib, ustat, sysfs, _sysctl, create_module, get_kernel_syms, query_module, nfsservctl, lookup_dcookie, quotactl, vhangup", stops: notImpl,
			py: "b = ctypes.create_string_buffer(256)\nR['errs'] = {'uselib': sc(134, cstr('/usr/bin/true'))[1], 'ustat': sc(136, 0, b)[1], 'sysfs': sc(139, 1, cstr('proc'))[1], '_sysctl': sc(156, b)[1], 'create_module': sc(174, cstr('x'), 64)[1], 'get_kernel_syms': sc(177, b)[1], 'query_module': sc(178, cstr('x'), 0, b, 0, b)[1], 'nfsservctl': sc(180, 0, b, b)[1], 'lookup_dcookie': sc(212, 1, b, 256)[1], 'quotactl': sc(179, 0x800001, cstr('/dev/vda'), 0, b)[1], 'vhangup': sc(153)[1]}", check: allFailed("errs")},
		{id: "kernel-fanotify", desc: "fanotify_init (watch the whole filesystem)", stops: notImpl + "; " + noCap, py: call(300, "0", "0"), check: failed},
		{id: "kernel-memfd-secret", desc: "memfd_secret", stops: notImpl, py: call(447, "0"), check: failed},
		{id: "kernel-lsm", desc: "landlock and LSM attribute calls (lsm_get_self_attr)", stops: notImpl,
			py: "b = ctypes.create_string_buffer(64)\nsz = ctypes.c_uint(64)\nR['errs'] = {'lsm_get_self_attr': sc(459, 100, b, ctypes.byref(sz), 0)[1], 'landlock_add_rule': sc(445, -1, 1, b, 0)[1]}", check: allFailed("errs")},
		// Odd arguments.
		{id: "kernel-odd-syscall-numbers", desc: "syscall numbers 999, -1, 0x40000027 (x32 ABI) and 512 (x32 range)", stops: sentryOnly,
			py: "R['errs'] = {str(n): sc(n)[1] for n in (999, -1, 0x40000000 | 39, 512, 100000)}", check: allFailed("errs")},
		{id: "kernel-odd-kernel-pointers", desc: "read and write with buffers at kernel addresses (0xffffffff81000000, 0xffff888000000000)", stops: sentryOnly + " (EFAULT)",
			py: "fd = os.open('/etc/passwd', os.O_RDONLY)\nr, w = os.pipe()\nos.write(w, b'abc')\nR['errs'] = {'read': sc(0, fd, 0xffffffff81000000, 16)[1], 'write': sc(1, w, 0xffff888000000000, 16)[1], 'pipe-read': sc(0, r, 0xffffffffff600000, 3)[1]}", check: allFailed("errs")},
		{id: "kernel-odd-mmap", desc: "mmap at address 0, at a kernel address, and of 2^62 bytes", stops: sentryOnly,
			py: "libc.mmap.restype = ctypes.c_void_p\nR['errs'] = {}\nfor n, a, l, f in (('zero', 0, 4096, 0x32), ('kernel', 0xffff800000000000, 4096, 0x32), ('huge', 0, 1 << 62, 0x22)):\n    r, e = sc(9, a, l, 3, f, -1, 0)\n    R['errs'][n] = e", check: allFailed("errs")},
		{id: "kernel-odd-iovecs", desc: "readv with 2^20 iovecs and with negative lengths", stops: sentryOnly + " (EINVAL)",
			py: "fd = os.open('/etc/passwd', os.O_RDONLY)\niov = struct.pack('Qq', 0x1000, -1)\nR['errs'] = {'count': sc(19, fd, iov, 1 << 20)[1], 'neglen': sc(19, fd, iov, 1)[1]}", check: allFailed("errs")},
		{id: "kernel-odd-futex", desc: "futex wait and requeue on unmapped and kernel addresses", stops: sentryOnly + " (EFAULT)",
			py: "R['errs'] = {'wait': sc(202, 0xdead0000, 0, 0, None, 0, 0)[1], 'requeue-kernel': sc(202, 0xffffffff81000000, 4, 1, 1, 0xffffffff82000000, 0)[1]}", check: allFailed("errs")},
		{id: "kernel-odd-clone-flags", desc: "clone with every flag bit set, and clone3 with a garbage struct", stops: sentryOnly + " (EINVAL)",
			py: "b = ctypes.create_string_buffer(b'\\xff' * 88, 88)\nR['errs'] = {'clone': sc(56, 0x7fffffffffffff00, 0, 0, 0, 0)[1], 'clone3': sc(435, b, 88)[1]}", check: allFailed("errs")},
		{id: "kernel-odd-select", desc: "select and poll with absurd sizes", stops: sentryOnly + " (EINVAL)",
			py: "R['errs'] = {'select': sc(23, 1 << 30, None, None, None, struct.pack('qq', 0, 0))[1], 'poll': sc(7, 0x1000, (1 << 20) + 1, 0)[1]}", check: allFailed("errs")},
		{id: "kernel-odd-ioctls", desc: "2000 random ioctl commands on /dev/null, /dev/tty-less pipes and a socket", stops: sentryOnly,
			py: "import random, fcntl\nrandom.seed(7)\nfds = [os.open('/dev/null', os.O_RDWR), os.pipe()[0], socket.socket().fileno(), os.open('/dev/ptmx', os.O_RDWR)]\nok = 0\nfor i in range(2000):\n    r, e = sc(16, random.choice(fds), random.getrandbits(32), random.getrandbits(64))\n    ok += r == 0\nR['ok'] = ok\nR['survived'] = True", check: isTrue("survived")},
		{id: "kernel-odd-sigreturn", desc: "rt_sigreturn with a forged frame (SROP)", stops: sentryOnly + ": only the calling process dies",
			py: "pid = os.fork()\nif pid == 0:\n    sc(15)\n    os._exit(0)\n_, st = os.waitpid(pid, 0)\nR['killed'] = os.WIFSIGNALED(st)", check: isTrue("killed")},
	}
}

// kernelUserAttempts run as the default user.
func kernelUserAttempts() []attempt {
	return []attempt{
		{id: "kernel-user-ptrace-root-sibling", desc: "as the default user, PTRACE_ATTACH to root's process (sleep 7778)", stops: "ptrace access check: another user",
			py: "pid = [int(p) for p in os.listdir('/proc') if p.isdigit() and '7778' in readf('/proc/%s/cmdline' % p)][0]\n" + call(101, "16", "pid", "0", "0"), check: failed},
		{id: "kernel-user-kill-agent", desc: "as the default user, SIGKILL and SIGTERM to the agent", stops: "kill permission check: another user",
			py: "R['errs'] = {s: tryio(os.kill, 1, getattr(signal, s))[1] for s in ('SIGKILL', 'SIGTERM', 'SIGHUP')}", check: allFailed("errs")},
		{id: "kernel-user-setuid", desc: "as the default user, setuid(0), setresuid and setgroups", stops: "no CAP_SETUID for the default user",
			py: "R['errs'] = {'setuid': sc(105, 0)[1], 'setresuid': sc(117, 0, 0, 0)[1], 'setgroups': sc(116, 1, struct.pack('I', 0))[1]}", check: allFailed("errs")},
		{id: "kernel-user-fuzz", desc: "as the default user, 20000 random system calls with random arguments in a throwaway child", stops: sentryOnly + "; guard checks the sandbox and its neighbours after",
			py: `
import random
pid = os.fork()
if pid == 0:
    random.seed(int(time.time()))
    for f in range(3, 1024):
        try: os.close(f)
        except OSError: pass
    skip = {9, 10, 11, 12, 15, 25, 34, 56, 57, 58, 59, 60, 61, 62, 101, 129, 157, 158, 200, 231, 234, 297, 317, 322, 424, 435, 7, 23, 35, 202, 230, 270, 271, 281, 232, 233, 0, 17, 19, 295, 45, 47, 299, 43, 288, 22, 293, 130, 128, 73, 72, 290, 284, 283, 286, 287, 28, 26, 149, 151, 216}
    nrs = [n for n in range(0, 460) if n not in skip]
    for i in range(20000):
        sc(random.choice(nrs), *[random.choice((0, 1, -1, 4096, random.getrandbits(64), random.getrandbits(16))) for _ in range(6)])
    os._exit(0)
deadline = time.time() + 15
while time.time() < deadline:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p: break
    time.sleep(0.05)
else:
    os.kill(pid, 9); os.waitpid(pid, 0); st = -1
R['status'] = st
R['survived'] = True
`, check: isTrue("survived")},
	}
}

func TestKernel(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	for user, cmd := range map[string]string{"user": "sleep 7777", "root": "sleep 7778"} {
		if _, err := d.Client.StartBackground(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: cmd, User: user}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	runGroup(t, d, sb.ID, "root", kernelAttempts())
	runGroup(t, d, sb.ID, "user", kernelUserAttempts())
	if got := sh(t, d, sb.ID, "root", "date +%s"); !closeToNow(got, before) {
		t.Errorf("the sandbox's clock reads %s after the clock attempts", got)
	}
	if h, _ := os.Hostname(); h == "pwned" {
		t.Error("the host's hostname is pwned")
	}
}

// closeToNow: unix seconds s is within a minute of the host's clock.
func closeToNow(s string, since time.Time) bool {
	var n int64
	fmt.Sscanf(strings.TrimSpace(s), "%d", &n)
	now := time.Now().Unix()
	return n >= since.Unix()-60 && n <= now+60
}

// agentHarmAttempts each run in a sandbox of their own: root inside sends
// the agent (PID 1) a signal or destroys its binary. Where the agent
// survives, it must still serve; where it dies (gVisor delivers SIGKILL to
// the sandbox's init from inside, unlike Linux), the sandbox ends and
// spaced must notice it, report it lost and remove what it held on the host,
// with the neighbour untouched.
func agentHarmAttempts() []attempt {
	var out []attempt
	sigs := []struct {
		sig, stops string
		survive    bool
	}{
		{"KILL", "not stopped: gVisor delivers SIGKILL to the sandbox's init from inside; contained: the sandbox ends, spaced reports it lost and cleans up (docs/security.md, known weakness)", false},
		{"STOP", "gVisor sentry: SIGSTOP from inside is not delivered to init", true},
		{"HUP", "space-agent ignores SIGHUP as PID 1, so it is dropped (the sysvinit reload idiom must not end a sandbox)", true},
		{"QUIT", "space-agent ignores SIGQUIT as PID 1", true},
		{"ABRT", "space-agent ignores SIGABRT as PID 1", true},
		{"SEGV", "not stopped (the Go runtime dies of a SIGSEGV sent with kill); contained as for SIGKILL", false},
		{"TERM", "not stopped: SIGTERM is the runtime's graceful stop; contained as for SIGKILL", false},
		{"USR1", "Go runtime: caught, no action", true},
		{"PIPE", "Go runtime: caught, no action", true},
	}
	for _, s := range sigs {
		out = append(out, attempt{id: "kernel-kill-agent-sig" + strings.ToLower(s.sig), category: "kernel",
			desc: "as root, kill -" + s.sig + " 1 (the agent)", stops: s.stops,
			run: func(t *testing.T) error { return harmAgent(t, "kill -"+s.sig+" 1; sleep 0.3; kill -CONT 1", s.survive) }})
	}
	out = append(out,
		attempt{id: "kernel-kill-all", category: "kernel", desc: "as root, kill(-1, SIGKILL): every process the caller may signal",
			stops: "gVisor sentry: kill(-1) spares init (and the caller); the agent keeps serving",
			run:   func(t *testing.T) error { return harmAgent(t, "python3 -c 'import os; os.kill(-1, 9)'", true) }},
		attempt{id: "kernel-agent-binary-truncate", category: "kernel", desc: "as root, truncate the running agent's binary (/proc/1/exe)",
			stops: "not stopped (gVisor has no ETXTBSY; the agent faults); contained: this sandbox's overlay copy only, the template is checked, spaced reports the sandbox lost",
			run:   func(t *testing.T) error { return harmAgent(t, ": > /proc/1/exe; sleep 0.3", false) }},
	)
	return out
}

// harmAgent runs cmd as root in a sandbox of its own, then checks that the
// agent still serves, or (unless it must survive) that spaced reports the
// sandbox ended and left nothing on the host.
func harmAgent(t *testing.T, cmd string, mustSurvive bool) error {
	d := env.d
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	d.Exec(harness.Ctx(t, 15*time.Second), sb.ID, client.CommandRequest{Cmd: cmd, User: "root"})
	r, err := d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "echo alive"})
	if err == nil && r.Stdout == "alive\n" {
		return nil
	}
	if mustSurvive {
		return fmt.Errorf("the agent did not survive: %v", err)
	}
	t.Logf("the agent did not survive (%v): checking that spaced noticed", err)
	var got *client.Sandbox
	if !harness.WaitFor(15*time.Second, func() bool {
		got, err = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), sb.ID)
		return err == nil && got.State != client.StateRunning
	}) {
		return fmt.Errorf("the agent is dead but spaced still reports the sandbox %+v (%v)", got, err)
	}
	if left := d.Leftovers(sb.ID); !harness.WaitFor(15*time.Second, func() bool { left = d.Leftovers(sb.ID); return len(left) == 0 }) {
		return fmt.Errorf("the dead sandbox left %v on the host", left)
	}
	t.Logf("the sandbox ended: state %s, reason %q", got.State, got.Reason)
	return nil
}

func TestAgentHarm(t *testing.T) {
	d := need(t)
	t.Parallel()
	for _, a := range agentHarmAttempts() {
		t.Run(a.id, func(t *testing.T) {
			t.Parallel()
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
	guard(t, d)
}
