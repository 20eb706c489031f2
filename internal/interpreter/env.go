package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Env vars reach a kernel through silent executions: the sandbox's own
// (the agent's state) whenever they change, and a request's env_vars
// before its cell, restored after it. The code of those executions is the
// kernel's language, and the values never become its syntax: Python and
// JavaScript get them as JSON text inside a string literal, bash from a
// file it sources (its cells reach bash through a terminal, which would
// act on control characters in a value).

type envOp int

const (
	envGlobal  envOp = iota // the sandbox's env vars: set the new ones, drop the ones gone
	envSet                  // a request's env_vars, saving what they replace
	envRestore              // put back what envSet replaced
)

// setEnv runs op with vars in k.
func (l *launcher) setEnv(ctx context.Context, k *kernel, op envOp, vars map[string]string) error {
	code, cleanup, err := l.envCode(k, op, vars)
	if err != nil {
		return err
	}
	defer cleanup()
	return runSilent(ctx, k, code)
}

// envCode is the silent code that runs op with vars in k's language, and
// what to do once it ran.
func (l *launcher) envCode(k *kernel, op envOp, vars map[string]string) (string, func(), error) {
	nothing := func() {}
	switch k.kind {
	case bashKernel:
		return l.bashEnv(k, op, vars)
	case denoKernel:
		return denoEnv(op, vars), nothing, nil
	case rKernel:
		code, err := rEnv(op, vars)
		return code, nothing, err
	case javaKernel:
		code, err := javaEnv(op, vars)
		return code, nothing, err
	}
	switch op {
	case envGlobal:
		return envCall("set_global_env", vars), nothing, nil
	case envSet:
		return envCall("set_env", vars), nothing, nil
	}
	return "__import__('_space_interpreter').restore_env()", nothing, nil
}

// envCall is the silent code that calls one of the startup file's env
// functions with vars as JSON text. The JSON text is itself written as a
// JSON string, which is also a valid Python string literal: no value can
// break out of it.
func envCall(fn string, vars map[string]string) string {
	return fmt.Sprintf("__import__('_space_interpreter').%s(%s)", fn, jsonLiteral(vars))
}

// jsonLiteral is vars as JSON text, written as a JSON string: a string
// literal in Python and in JavaScript alike.
func jsonLiteral(vars map[string]string) string {
	if vars == nil {
		vars = map[string]string{}
	}
	inner, _ := json.Marshal(vars)
	lit, _ := json.Marshal(string(inner))
	return string(lit)
}

// denoEnv is the silent code for Deno's kernel: arrow functions called at
// once, keeping their state in the global object under symbols (which no
// user name can collide with). A name Deno.env refuses ("", "=", NUL)
// fails envSet; in envGlobal it is skipped.
func denoEnv(op envOp, vars map[string]string) string {
	switch op {
	case envGlobal:
		return `(() => { const n = JSON.parse(` + jsonLiteral(vars) + `); const g = Symbol.for("space.globalEnv");` +
			` for (const k of Object.keys(globalThis[g] ?? {})) if (!Object.hasOwn(n, k)) Deno.env.delete(k);` +
			` for (const [k, v] of Object.entries(n)) { try { Deno.env.set(k, v) } catch {} }` +
			` globalThis[g] = n })()`
	case envSet:
		return `(() => { const n = JSON.parse(` + jsonLiteral(vars) + `);` +
			` globalThis[Symbol.for("space.savedEnv")] = Object.fromEntries(Object.keys(n).map((k) => [k, Deno.env.get(k)]));` +
			` for (const [k, v] of Object.entries(n)) Deno.env.set(k, v) })()`
	}
	return `(() => { const s = Symbol.for("space.savedEnv");` +
		` for (const [k, v] of Object.entries(globalThis[s] ?? {})) v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v);` +
		` delete globalThis[s] })()`
}

// bashName is a name bash can export.
var bashName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bashEnv writes the export statements into a file in the kernel's
// directory (0600, the kernel user's; removed once sourced) and returns
// the command that sources it. What a request's env_vars replace is kept
// in the shell as `declare -p` output, which bash reads back exactly.
// Names bash cannot export, and values with NUL, fail envSet; in
// envGlobal they are skipped (no bash program could see them).
func (l *launcher) bashEnv(k *kernel, op envOp, vars map[string]string) (string, func(), error) {
	if op == envRestore {
		return `eval "${__space_env_restore-}"; unset -v __space_env_restore`, func() {}, nil
	}
	names := make([]string, 0, len(vars))
	for name, v := range vars {
		if !bashName.MatchString(name) || strings.ContainsRune(v, 0) {
			if op == envSet {
				return "", nil, fmt.Errorf("env var %q cannot be set in bash (a name is letters, digits and _, not starting with a digit; no NUL in a value)", name)
			}
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	switch op {
	case envGlobal:
		// The names set last time are in __space_global_env.
		b.WriteString("for __space_k in ${__space_global_env-}; do unset -v \"$__space_k\"; done; unset -v __space_k\n")
		fmt.Fprintf(&b, "__space_global_env=%s\n", shellQuote(strings.Join(names, " ")))
	case envSet:
		b.WriteString("__space_env_restore=\"unset -v " + strings.Join(names, " ") + "\n")
		for _, name := range names {
			fmt.Fprintf(&b, "$(declare -p %s 2>/dev/null)\n", name)
		}
		b.WriteString("\"\n")
	}
	if len(names) > 0 {
		// One export: its status is non-zero if any name fails (a
		// readonly variable), which fails the silent execution.
		b.WriteString("export")
		for _, name := range names {
			fmt.Fprintf(&b, " %s=%s", name, shellQuote(vars[name]))
		}
		b.WriteString("\n")
	}
	path := filepath.Join(k.dir, "env.sh")
	cleanup := func() { _ = os.Remove(path) }
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", nil, fmt.Errorf("write env file: %w", err)
	}
	if err := l.chown(path); err != nil {
		cleanup()
		return "", nil, err
	}
	return "source " + shellQuote(path), cleanup, nil
}

// shellQuote is s in single quotes, where bash takes every byte as it is
// but the quote itself.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
