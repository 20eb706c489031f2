package interpreter

import (
	_ "embed"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// kernelKind is the kernel a context's language runs on.
type kernelKind int

const (
	ipykernel  kernelKind = iota // python
	bashKernel                   // bash: bash_kernel (PyPI), on the kernels' Python
	denoKernel                   // javascript and typescript: `deno jupyter`
	rKernel                      // r: IRkernel (rjava.go)
	javaKernel                   // java: JJava, on JShell (rjava.go)
)

// languages are E2B's language names (as normalizeLanguage leaves them)
// that this server has a kernel for, as E2B's server has.
var languages = map[string]kernelKind{
	"python":     ipykernel,
	"bash":       bashKernel,
	"javascript": denoKernel,
	"typescript": denoKernel,
	"r":          rKernel,
	"java":       javaKernel,
}

const supportedLanguages = "python, bash, javascript (js), typescript (ts), r and java"

// normalizeLanguage spells a request's language the way E2B's server
// does: trimmed, lower case, empty meaning python, js and ts spelled out.
func normalizeLanguage(lang string) string {
	lang = strings.ToLower(strings.TrimSpace(lang))
	switch lang {
	case "":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return lang
}

// language checks a request's language: its normalized name and kernel,
// or an error for a 400 when there is no kernel for it here.
func (s *Server) language(lang string) (string, kernelKind, error) {
	name := normalizeLanguage(lang)
	kind, ok := languages[name]
	if !ok {
		return "", 0, fmt.Errorf("language %q is not supported here: this code interpreter runs %s", name, supportedLanguages)
	}
	if err := s.kernels.available(kind); err != nil {
		return "", 0, fmt.Errorf("language %q is not available in this sandbox: %w", name, err)
	}
	return name, kind, nil
}

// kernelAvailability finds out, once per kind, whether its kernel is
// installed, so that a missing one is a clear 400 and not a kernel that
// dies while starting.
type kernelAvailability struct {
	python string // the kernels' Python
	deno   string // "": javascript and typescript are off

	bashOnce, denoOnce sync.Once
	bashErr, denoErr   error

	rjava rjavaAvailability
}

func (a *kernelAvailability) available(kind kernelKind) error {
	switch kind {
	case bashKernel:
		a.bashOnce.Do(func() {
			out, err := exec.Command(a.python, "-c", "import bash_kernel").CombinedOutput()
			if err != nil {
				a.bashErr = fmt.Errorf("%s cannot import bash_kernel (install it from the wheelhouse: scripts/interpreter-requirements.txt): %v: %s",
					a.python, err, strings.TrimSpace(string(out)))
			}
		})
		return a.bashErr
	case denoKernel:
		a.denoOnce.Do(func() {
			if a.deno == "" {
				a.denoErr = fmt.Errorf("it needs Deno: start space-interpreter with -deno PATH (the code-interpreter template does)")
				return
			}
			if _, err := exec.LookPath(a.deno); err != nil {
				a.denoErr = fmt.Errorf("deno: %w", err)
			}
		})
		return a.denoErr
	case rKernel, javaKernel:
		return a.rjava.available(kind)
	}
	return nil
}

// command is what starts a kernel of kind with the connection file conn:
// the program, its arguments and what it needs in its environment
// besides the launcher's.
func (l *launcher) command(kind kernelKind, conn string) (string, []string, []string) {
	// The rlimit is set by the kernel's Python itself, before it loads
	// anything: Go cannot give one child an rlimit, and prlimit(2) on a
	// child that runs as another user needs CAP_SYS_RESOURCE.
	pyKernel := func(module string, args ...string) []string {
		// Quick flushes (kernel.go) for ipykernel only: bash_kernel's cells
		// do not go through its flushes, and are not worth a change there.
		quick := "0"
		if l.quick && module == "ipykernel_launcher" {
			quick = "1"
			args = append(args, "--Kernel._execute_sleep=0")
		}
		// Messages packed by the standard library's json, not orjson
		// (jupyter_client's default when it is installed, as it is here
		// for the JSON formatter): orjson dereferences the NULL of an
		// allocation that RLIMIT_AS refused and the kernel dies of
		// SIGSEGV, where json raises MemoryError and the kernel lives.
		args = append(args, "--Session.packer=json", "--Session.unpacker=json")
		return append([]string{"-c", bootstrap, strconv.FormatUint(l.addrSpace, 10), strconv.Itoa(iopubQueue),
			quick, module, "-f", conn}, args...)
	}
	switch kind {
	case bashKernel:
		// bash_kernel runs bash on a pty, in a session of its own: bash
		// and what it starts inherit the rlimit, and reach interrupts
		// through the kernel (it sends ^C on the pty when it gets SIGINT).
		// Its hook reads a cell's output in one pass and bounds it under
		// the server's output limit (hooks/bash_kernel.py).
		return l.python, pyKernel("bash_kernel"), append(l.outputLimitEnv(), "SPACE_BASH_HOOK="+bashHookCode)
	case denoKernel:
		// V8 reserves tens of GiB of address space, so RLIMIT_AS cannot
		// apply; its heap is bounded instead, past which the kernel dies
		// (and a new one starts) instead of the sandbox.
		// --expose-gc: the output hook collects after a cell that printed
		// much, and hides gc from the user's code (hooks/deno.js). Blocks
		// of 128 KiB and more are mmapped, always (glibc raises that bound
		// as big blocks are freed, up to 32 MiB, and blocks under it stay
		// in the heap): Deno's own copies of a big print otherwise kept
		// 150 MiB resident after it.
		flags := "--expose-gc"
		if heap := vmHeapMiB(l.addrSpace); heap > 0 {
			flags += ",--max-old-space-size=" + strconv.FormatUint(heap, 10)
		}
		env := []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", "DENO_NO_PROMPT=1", "DENO_V8_FLAGS=" + flags, "MALLOC_MMAP_THRESHOLD_=131072"}
		return l.deno, []string{"jupyter", "--kernel", "--conn", conn}, env
	case rKernel:
		return l.rCommand(conn)
	case javaKernel:
		return l.javaCommand(conn)
	}
	// The startup file bounds each execution's stdout and stderr in the
	// kernel under the server's output limit (startup/00-space.py).
	env := l.outputLimitEnv()
	return l.python, pyKernel("ipykernel_launcher",
		// Plain tracebacks, as E2B's kernels give (no ANSI colours).
		"--InteractiveShell.colors=NoColor",
		// History in memory: In[] works, and no sqlite file is written
		// (or locked) in a home directory.
		"--HistoryManager.hist_file=:memory:",
	), env
}

// kernelName is the connection file's kernel_name.
func (k kernelKind) kernelName() string {
	switch k {
	case bashKernel:
		return "bash"
	case denoKernel:
		return "deno"
	case rKernel:
		return "ir"
	case javaKernel:
		return "java"
	}
	return "python3"
}

// outputLimitEnv tells a Python kernel's hooks the server's output limit,
// under which they bound each execution's output (none: no bound).
func (l *launcher) outputLimitEnv() []string {
	if l.maxOutput <= 0 {
		return nil
	}
	return []string{"SPACE_MAX_OUTPUT_BYTES=" + strconv.FormatInt(l.maxOutput, 10)}
}

// bashHookCode is what bash_kernel's bootstrap runs before the kernel
// starts (kernel.go's bootstrap).
//
//go:embed hooks/bash_kernel.py
var bashHookCode string

// tcpOnly reports a kernel that listens on TCP only (Deno's, JJava's:
// their ZeroMQ has no unix sockets), or is dialled so (IRkernel, rjava.go).
func (k kernelKind) tcpOnly() bool {
	return k == denoKernel || k == rKernel || k == javaKernel
}

// interruptByMessage reports a kernel that dies of SIGINT (Deno, a JVM)
// and takes an interrupt_request on its control channel instead (its
// kernelspec's "message" interrupt mode).
func (k kernelKind) interruptByMessage() bool {
	return k == denoKernel || k == javaKernel
}
