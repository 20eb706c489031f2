package interpreter

// R and Java: the kernels of E2B's languages "r" (IRkernel, Debian's
// r-cran-irkernel) and "java" (JJava, IJava's maintained successor, from
// PyPI's jjava wheel, on the JDK's JShell). Both listen on loopback TCP:
// JJava's ZeroMQ (JeroMQ) has no unix sockets, and IRkernel is kept the
// same so both are dialled alike.

import (
	_ "embed"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// rHookCode is the silent cell an R kernel runs when it starts: it bounds
// each execution's output in the kernel (IRkernel's sends and evaluate's
// capture) under the server's output limit.
//
//go:embed hooks/irkernel.R
var rHookCode string

// rHook is that cell for an output limit of limit bytes: the hook's
// function called with it (on the same line: a newline would end the
// expression before the call).
func rHook(limit int64) string {
	return strings.TrimRight(rHookCode, "\n") + "(" + strconv.FormatInt(limit, 10) + ")"
}

// javaHookCode is the silent cell a JJava kernel runs when it starts: it
// bounds each execution's System.out and System.err output in the kernel
// under the server's output limit.
//
//go:embed hooks/jjava.jsh
var javaHookCode string

// javaHook is that cell for an output limit of limit bytes, without its
// comment lines: JJava (1.0a8) never ended a cell that started with them.
func javaHook(limit int64) string {
	var b strings.Builder
	for _, line := range strings.Split(javaHookCode, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "//") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.Replace(b.String(), "SPACE_OUTPUT_LIMIT", strconv.FormatInt(limit, 10)+"L", 1)
}

// rjavaAvailability finds out, once each, whether R with IRkernel and
// a JDK with JJava are here.
type rjavaAvailability struct {
	r     string // R ("": r is off)
	java  string // java
	jjava string // JJava's jar ("": java is off)

	rOnce, javaOnce sync.Once
	rErr, javaErr   error
}

func (a *rjavaAvailability) available(kind kernelKind) error {
	switch kind {
	case rKernel:
		a.rOnce.Do(func() {
			if a.r == "" {
				a.rErr = fmt.Errorf("it needs R with IRkernel: start space-interpreter with -r PATH (the code-interpreter template does)")
				return
			}
			out, err := exec.Command(a.r, "--no-echo", "--no-restore", "-e", `invisible(packageVersion("IRkernel"))`).CombinedOutput()
			if err != nil {
				a.rErr = fmt.Errorf("%s cannot load IRkernel (Debian's r-cran-irkernel): %v: %s", a.r, err, strings.TrimSpace(string(out)))
			}
		})
		return a.rErr
	case javaKernel:
		a.javaOnce.Do(func() {
			if a.jjava == "" {
				a.javaErr = fmt.Errorf("it needs JJava: start space-interpreter with -jjava JAR (the code-interpreter template does)")
				return
			}
			if _, err := os.Stat(a.jjava); err != nil {
				a.javaErr = fmt.Errorf("jjava: %w", err)
				return
			}
			// JShell is in the JDK, not a JRE.
			out, err := exec.Command(a.java, "--list-modules").CombinedOutput()
			if err != nil {
				a.javaErr = fmt.Errorf("%s: %v: %s", a.java, err, strings.TrimSpace(string(out)))
				return
			}
			if !strings.Contains(string(out), "jdk.jshell@") {
				a.javaErr = fmt.Errorf("%s has no JShell (module jdk.jshell): a JDK is needed, not a JRE", a.java)
			}
		})
		return a.javaErr
	}
	return nil
}

// rCommand starts IRkernel as its kernelspec does, under RLIMIT_AS set by
// the shell it starts from (R cannot set it on itself before it loads).
func (l *launcher) rCommand(conn string) (string, []string, []string) {
	args := []string{l.r, "--no-echo", "--no-save", "--no-restore", "-e", "IRkernel::main()", "--args", conn}
	if l.addrSpace == 0 {
		return args[0], args[1:], nil
	}
	// ulimit -v is in KiB; dash sets the soft and the hard limit both.
	return "/bin/sh", append([]string{"-c", `ulimit -v "$0" && exec "$@"`, strconv.FormatUint(l.addrSpace>>10, 10)}, args...), nil
}

// javaCommand starts JJava's kernel in one JVM (its launcher jar would
// start a second one with the same arguments). A JVM reserves more
// address space than it uses (its class space alone is 1 GiB), so no
// RLIMIT_AS: its heap is bounded instead, as Deno's is, and a cell that
// fills it gets an OutOfMemoryError while the kernel lives.
func (l *launcher) javaCommand(conn string) (string, []string, []string) {
	args := []string{}
	if heap := jvmHeapMiB(l.addrSpace); heap > 0 {
		args = append(args, "-Xmx"+strconv.FormatUint(heap, 10)+"m")
	}
	args = append(args,
		// A smaller reservation for classes and compiled code: a kernel
		// runs snippets, not a server.
		"-XX:CompressedClassSpaceSize=128m", "-XX:ReservedCodeCacheSize=64m",
		"-Djava.awt.headless=true",
		"--add-opens", "jdk.jshell/jdk.jshell=ALL-UNNAMED",
		"-jar", l.jjava, conn)
	return l.java, args, nil
}

// envName is a name the kernel can hold: R's Sys.setenv and Java's
// System.setProperty take any other than these, and a value with NUL
// cannot be an environment variable's.
func envName(name, value string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") || strings.ContainsRune(value, 0) {
		return fmt.Errorf("env var %q cannot be set (a name is not empty and has no = or NUL; no NUL in a value)", name)
	}
	return nil
}

// checkedEnv is vars' names in order, those the kernel cannot hold
// failing envSet (EnvVarsError) and skipped in envGlobal.
func checkedEnv(op envOp, vars map[string]string) ([]string, error) {
	names := make([]string, 0, len(vars))
	for name, v := range vars {
		if err := envName(name, v); err != nil {
			if op == envSet {
				return nil, err
			}
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// rEnv is the silent R code for op: real environment variables
// (Sys.setenv, as E2B's server does), so programs a cell starts see them
// too. What it must remember between executions (the sandbox's names,
// what a request's env_vars replaced) is kept in R's options, out of the
// user's workspace. Names and values are R string literals (rString).
func rEnv(op envOp, vars map[string]string) (string, error) {
	if op == envRestore {
		return `local({s <- getOption("space.saved_env"); options(space.saved_env = NULL);` +
			` for (i in seq_along(s$n)) { if (is.na(s$v[i])) Sys.unsetenv(s$n[i]) else do.call(Sys.setenv, stats::setNames(list(s$v[i]), s$n[i])) }})`, nil
	}
	names, err := checkedEnv(op, vars)
	if err != nil {
		return "", err
	}
	n, v := rVector(names, nil), rVector(names, vars)
	if op == envGlobal {
		return `local({n <- ` + n + `; v <- ` + v + `;` +
			` for (k in setdiff(getOption("space.global_env", character()), n)) Sys.unsetenv(k);` +
			` for (i in seq_along(n)) try(do.call(Sys.setenv, stats::setNames(list(v[i]), n[i])), silent = TRUE);` +
			` options(space.global_env = n)})`, nil
	}
	return `local({n <- ` + n + `; v <- ` + v + `;` +
		` options(space.saved_env = list(n = n, v = Sys.getenv(n, unset = NA, names = FALSE)));` +
		` for (i in seq_along(n)) do.call(Sys.setenv, stats::setNames(list(v[i]), n[i]))})`, nil
}

// rVector is an R character vector of names, or of their values in vars.
func rVector(names []string, vars map[string]string) string {
	if len(names) == 0 {
		return "character()"
	}
	parts := make([]string, len(names))
	for i, name := range names {
		if vars != nil {
			name = vars[name]
		}
		parts[i] = rString(name)
	}
	return "c(" + strings.Join(parts, ", ") + ")"
}

// rString is s as an R string literal: R takes every character between
// double quotes as it is but the backslash and the quote; control
// characters are escaped so that the code stays one line. s has no NUL
// (envName), which no R string can hold.
func rString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Java's env vars are system properties, as on E2B (its server sets them
// with System.setProperty, and its tests read System.getProperty): a JVM
// cannot change its own environment. The properties below hold what must
// be remembered between executions, names and values in base64 (which
// also keeps them out of Java's syntax: no string literal in this code
// holds a character of theirs).
const (
	javaGlobalProp = "space.interpreter.globalEnv" // the sandbox's names, comma-separated
	javaSavedProp  = "space.interpreter.savedEnv"  // name:value or name (was unset), comma-separated
)

// javaEnv is the silent Java (JShell) code for op: one block, its helper
// a lambda local to it, so it declares nothing in the user's session.
func javaEnv(op envOp, vars map[string]string) (string, error) {
	const decode = `java.util.function.Function<String, String> d = s -> new String(java.util.Base64.getDecoder().decode(s), java.nio.charset.StandardCharsets.UTF_8); `
	if op == envRestore {
		return `{ ` + decode + `String saved = System.getProperty("` + javaSavedProp + `", ""); System.clearProperty("` + javaSavedProp + `");` +
			` for (String e : saved.split(",")) { if (e.isEmpty()) continue; String[] p = e.split(":", -1);` +
			` if (p.length == 1) System.clearProperty(d.apply(p[0])); else System.setProperty(d.apply(p[0]), d.apply(p[1])); } }`, nil
	}
	names, err := checkedEnv(op, vars)
	if err != nil {
		return "", err
	}
	b64 := func(s string) string { return `"` + base64.StdEncoding.EncodeToString([]byte(s)) + `"` }
	var set, keys strings.Builder
	for i, name := range names {
		fmt.Fprintf(&set, ` System.setProperty(d.apply(%s), d.apply(%s));`, b64(name), b64(vars[name]))
		if i > 0 {
			keys.WriteByte(',')
		}
		keys.WriteString(base64.StdEncoding.EncodeToString([]byte(name)))
	}
	if op == envGlobal {
		return `{ ` + decode + `java.util.Set<String> now = java.util.Set.of("` + keys.String() + `".split(","));` +
			` for (String k : System.getProperty("` + javaGlobalProp + `", "").split(",")) { if (!k.isEmpty() && !now.contains(k)) System.clearProperty(d.apply(k)); }` +
			set.String() + ` System.setProperty("` + javaGlobalProp + `", "` + keys.String() + `"); }`, nil
	}
	return `{ ` + decode + `java.util.function.Function<String, String> e = s -> java.util.Base64.getEncoder().encodeToString(s.getBytes(java.nio.charset.StandardCharsets.UTF_8));` +
		` StringBuilder saved = new StringBuilder(); for (String k : "` + keys.String() + `".split(",")) { if (k.isEmpty()) continue;` +
		` String old = System.getProperty(d.apply(k)); if (saved.length() > 0) saved.append(','); saved.append(k); if (old != null) saved.append(':').append(e.apply(old)); }` +
		` System.setProperty("` + javaSavedProp + `", saved.toString());` + set.String() + ` }`, nil
}
