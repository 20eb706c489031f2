/*
 * space-spawn starts processes for space-agent inside a sandbox.
 *
 * A Go program's child resets every signal handler the Go runtime
 * installed (about 55 rt_sigaction calls) between its fork and its execve.
 * Under gVisor's systrap each of those is a trap into the sentry: they
 * are most of a process start's cost. This helper installs no handler, so
 * its child goes straight to the few steps a start needs.
 *
 * The agent starts it once, with fd 3 a SOCK_SEQPACKET socket, and sends
 * one request per process: a header of little-endian uint32s (flags, uid,
 * gid, number of groups, argc, envc), the groups, then NUL-terminated
 * strings (path, dir, argv, envp), with the child's stdin, stdout and
 * stderr as SCM_RIGHTS. The child is cloned with CLONE_PARENT, so the
 * agent is its parent and waits for it itself. The answer is two int32s:
 * the pid (0 if none) and an errno (0 on success). A child that failed
 * before its execve has exited; the agent reaps it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { SETPGID = 1, SETSID = 2, SETCTTY = 4, SETCRED = 8 };

#define SOCK 3
#define MAX_MESSAGE (64 << 10)
#define MAX_STRINGS 8192
#define MAX_GROUPS 256

struct header {
	uint32_t flags, uid, gid, ngroups, argc, envc;
};

/* The request and the answer are little-endian (spawner.go) and read and
 * written here as they lie in memory: amd64 and arm64 are both. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "space-spawn speaks little-endian natively");

/* One request: shared with the child (CLONE_VM), which writes err when a
 * step fails. */
static struct {
	struct header h;
	uint32_t groups[MAX_GROUPS];
	int fds[3];
	char *path, *dir;
	char *argv[MAX_STRINGS + 1], *envp[MAX_STRINGS + 1];
	volatile int err;
} req;

static char message[MAX_MESSAGE + 1];
static char stack[64 << 10] __attribute__((aligned(16)));

/* The child makes raw system calls only: it runs on the helper's memory
 * with the helper's thread pointer, so libc state is not its own. */
static int fail(void) {
	req.err = errno;
	syscall(SYS_exit, 127);
	return 127;
}

static int child(void *unused) {
	(void)unused;
	if (req.h.flags & SETSID) {
		if (syscall(SYS_setsid) < 0) return fail();
	} else if (req.h.flags & SETPGID) {
		if (syscall(SYS_setpgid, 0, 0) < 0) return fail();
	}
	if (req.h.flags & SETCRED) {
		if (syscall(SYS_setgroups, req.h.ngroups, req.groups) < 0 ||
		    syscall(SYS_setgid, req.h.gid) < 0 || syscall(SYS_setuid, req.h.uid) < 0)
			return fail();
	}
	if (req.dir[0] && syscall(SYS_chdir, req.dir) < 0) return fail();
	for (int i = 0; i < 3; i++)
		if (syscall(SYS_dup3, req.fds[i], i, 0) < 0) return fail();
	if ((req.h.flags & SETCTTY) && syscall(SYS_ioctl, 0, TIOCSCTTY, 1) < 0) return fail();
	syscall(SYS_execve, req.path, req.argv, req.envp);
	return fail();
}

/* strings points list[0..count) at count NUL-terminated strings from *p,
 * within end, and sets list[count] to NULL (list holds count + 1). */
static int strings(char **p, char *end, char **list, uint32_t count) {
	for (uint32_t i = 0; i < count; i++) {
		size_t n = strnlen(*p, end - *p);
		if (*p + n >= end) return -1;
		list[i] = *p;
		*p += n + 1;
	}
	list[count] = 0;
	return 0;
}

/* parse fills req from a message of n bytes, or returns -1. */
static int parse(size_t n) {
	char *p = message, *end = message + n;
	if (n < sizeof req.h) return -1;
	memcpy(&req.h, p, sizeof req.h);
	p += sizeof req.h;
	if (req.h.ngroups > MAX_GROUPS || req.h.argc == 0 || req.h.argc > MAX_STRINGS || req.h.envc > MAX_STRINGS) return -1;
	if ((size_t)(end - p) < req.h.ngroups * sizeof(uint32_t)) return -1;
	memcpy(req.groups, p, req.h.ngroups * sizeof(uint32_t));
	p += req.h.ngroups * sizeof(uint32_t);
	char *head[3];
	if (strings(&p, end, head, 2) < 0) return -1;
	req.path = head[0];
	req.dir = head[1];
	if (strings(&p, end, req.argv, req.h.argc) < 0 || strings(&p, end, req.envp, req.h.envc) < 0) return -1;
	return p == end ? 0 : -1;
}

int main(void) {
	/* Nothing may read this process's memory (it holds the requests'
	 * environments), no child may inherit its socket, and children start
	 * with no signal blocked (they inherit this process's mask; the
	 * handlers are all the default, it installs none). */
	sigset_t none;
	sigemptyset(&none);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || fcntl(SOCK, F_SETFD, FD_CLOEXEC) < 0 ||
	    sigprocmask(SIG_SETMASK, &none, 0) < 0)
		return 1;
	for (;;) {
		/* Aligned for the cmsghdr read from it (cmsg(3)): a char array
		 * need not be, which x86 forgives and a strict-alignment CPU not. */
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} control;
		struct iovec iov = {message, MAX_MESSAGE};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
		ssize_t n = recvmsg(SOCK, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) return 0; /* the agent is gone */
		message[n] = 0;

		int nfds = 0;
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(req.fds, CMSG_DATA(c), (nfds < 3 ? nfds : 3) * sizeof(int));
		}
		int32_t answer[2] = {0, EINVAL};
		if (nfds == 3 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && parse(n) == 0) {
			req.err = 0;
			int pid = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, 0);
			answer[0] = pid < 0 ? 0 : pid;
			answer[1] = pid < 0 ? errno : req.err;
		}
		/* The answer first: the agent waits for it, not for the closes
		 * (three traps into the sentry), which end before the next
		 * request is read. */
		if (send(SOCK, answer, sizeof answer, MSG_NOSIGNAL) != sizeof answer) return 0;
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int all[4];
			int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(all, CMSG_DATA(c), (k < 4 ? k : 4) * sizeof(int));
			for (int i = 0; i < k && i < 4; i++) close(all[i]);
		}
	}
}
