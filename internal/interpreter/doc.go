// Package interpreter is the code interpreter that runs inside a sandbox
// (cmd/space-interpreter): E2B's code-interpreter HTTP API, as the
// unmodified e2b-code-interpreter (PyPI) and @e2b/code-interpreter (npm)
// SDKs call it on port 49999, over Jupyter kernels that it starts and
// owns: ipykernel for python, bash_kernel for bash, Deno's for javascript
// and typescript.
//
// # API
//
//	GET    /health                 200 "OK" once the default kernel is up (503 before)
//	POST   /execute                200 + NDJSON, one line per event, each flushed
//	POST   /contexts               {"language","cwd"} -> {"id","language","cwd"}
//	GET    /contexts               [{"id","language","cwd"}, ...]
//	POST   /contexts/{id}/restart  a new kernel, same id and directory
//	DELETE /contexts/{id}
//
// and SPACE's resumable executions (for spaced's native API, not the SDKs):
//
//	POST   /executions                  as /execute, but the cell outlives its client
//	GET    /executions/{id}/events?after=N  its lines with seq > N, then live
//	POST   /executions/{id}/interrupt   -> {"id","context_id","state",...}
//	GET    /executions                  [{"id","context_id","state","started_at","ended_at"}, ...]
//
// /execute takes {"code", "context_id" | "language", "env_vars",
// "timeout"} (timeout, in seconds, is ours: the SDKs time out by closing
// the connection). Its lines: number_of_executions, stdout and stderr (with
// the kernel's timestamp), result (E2B's keys only: text, html, markdown,
// svg, png, jpeg, pdf, latex, json, javascript, data, chart, extra,
// is_main_result), error (name, value, traceback as text), keepalive after
// 5 s of quiet, and end_of_execution, or unexpected_end_of_execution when
// the kernel died (with an error line first, since the SDKs ignore that
// type). Both context_id and language is a 400, an unknown context a 404
// with a plain-text body (the SDKs' NotFound), a language without a kernel
// here a 400 that says why (say javascript without -deno, r without -r).
//
// # Languages
//
// Names as E2B's server takes them (trimmed, any case, js and ts for
// javascript and typescript; none is python): python, bash, javascript,
// typescript (languages.go), r and java (rjava.go). A context's language picks its kernel. An
// execution that names a language and no context runs on that language's
// default context, made by the first such execution (python's is made at
// start), as E2B's server does; javascript and typescript have one each.
//
// bash (bash_kernel, on the kernels' Python): bash runs on a terminal, so
// stderr arrives as stdout; a cell whose last command fails ends with an
// error named ExitStatus whose value is the status ("2"; E2B's server
// passes bash_kernel's empty name on); an interrupt is bash_kernel's ^C,
// after which the cell ends with ExecutionAborted (TimeoutError for a
// timeout). There are no results but what bash_kernel's display helpers
// send.
//
// javascript and typescript (`deno jupyter`, both languages in one
// kernel, type annotations stripped, not checked): Deno's kernel listens
// on loopback TCP only, and takes interrupts as a control message (SIGINT
// kills it), which stop a busy loop but not an await: such a cell is ended
// by a restart of its kernel after the grace. Deno says idle before all
// of a cell's output is out, so a cell ends once an output fence
// (denofence.go), a sentinel printed through the kernel's own output
// queue, came back.
//
// /executions takes /execute's body and answers the same way, with these
// differences. The first line is {"type":"execution","id":...}; every
// line carries "seq", 1, 2, 3... within the execution, so that a client
// can come back for what it missed; and a client that leaves does not
// interrupt the cell: only its timeout, POST .../interrupt (the same
// SIGINT), or the context's restart or deletion end it early. An
// execution interrupted while it waits for its context's turn ends with
// an ExecutionInterrupted error line, having never run. The lines are
// kept in a per-execution log (execlog.go): the first and the end line
// always, the ones between up to ExecutionLogBytes (4 MiB), the oldest
// dropped first. GET .../events replays the kept lines after N, then
// follows until the end line; where lines were dropped it sends
// {"type":"gap","seq":S,"dropped":K} instead (S the last dropped seq, K
// how many after N), which is the first line of any resume (N >= 1).
// Keepalives are not kept: each stream sends its own after 5 s of quiet,
// with the seq it has reached. The last KeepExecutions (64) executions
// are kept, and at most ExecutionLogsBytes (64 MiB) of their lines:
// finished ones go first, oldest first; running ones always stay. An
// unknown (or dropped) id is a 404.
//
// # Kernels
//
// One kernel process per context, started with the context's directory
// as its working directory, in its own process group. Python kernels
// (ipykernel, bash_kernel) get RLIMIT_AS below the sandbox's memory
// (memlimit.go says why), and are reached over ZeroMQ on unix sockets in a
// 0700 directory (internal/interpreter/jupyter). Deno's V8 reserves tens
// of GiB of address space, so its heap is bounded instead (past it the
// kernel dies, not the sandbox), and it is reached on loopback TCP ports,
// where another process of the sandbox could read its output but, without
// the key in the 0600 connection file, not run anything. A default Python
// context is started at Start, so a sandbox restored from a template's
// checkpoint has a warm kernel. A context runs one execution at a time,
// in arrival order; contexts run in parallel.
//
// An execution ends when the kernel is idle and has replied. A client
// that leaves /execute (the request's context ends, or a write fails), a
// timeout and POST /executions/{id}/interrupt all interrupt the cell
// (SIGINT to the kernel's process group; Deno: an interrupt_request on
// its control channel); the execution then still waits
// for the kernel to finish the cell (a cell that ignores the interrupt for
// 10 s gets its kernel restarted), so the next cell always finds the
// kernel idle. A kernel that dies is reported
// and replaced on the next request. A kernel is killed with its process
// group and the sessions of its children (bash_kernel's bash runs on a
// pty in a session of its own), so what a cell started goes with it. Output past MaxOutputBytes is dropped
// where it is read from the kernel, with one marker line, so a cell that
// prints without end never grows the server; and no single kernel message
// is read into memory past MaxOutputBytes and 64 KiB (jupyter's frame
// limit: the rest is read and dropped), so neither does one huge print.
// Each kernel also cuts its own output a little under MaxOutputBytes
// before it becomes a message (Python: startup/00-space.py; Deno:
// hooks/deno.js; bash: hooks/bash_kernel.py) and says so with a
// space_output_truncated message, so that no kernel holds a message of
// hundreds of MiB either.
//
// Env vars: the sandbox's own (the agent's state file) are set in a kernel
// by a silent execution whenever they change, and an execution's env_vars
// by silent executions before and after the cell that set and restore
// them, in every language (env.go): the user's code is sent untouched, so
// tracebacks keep its line numbers, and the values never become code:
// Python and JavaScript get them as JSON text in a string literal, bash
// sources a 0600 file of quoted exports (written into the kernel's
// directory, removed once read), since what reaches bash_kernel's bash
// goes through a terminal, which acts on control characters. In bash a
// name must be one bash can export (else EnvVarsError; the sandbox's own
// such names are skipped). The startup file (startup/00-space.py, embedded and written into the
// kernels' IPython profile) defines the functions those executions call,
// and the e2b/data (pandas DataFrame), e2b/chart (matplotlib Figure
// through e2b-charts) and application/json formatters the SDKs read as
// data, chart and json.
//
// # Auth
//
// The token is the sandbox's access token, which the agent keeps in its
// state file (/run/space-agent/state.json, root-only); it changes every
// time a sandbox restored from a checkpoint is handed to a caller, so it
// is read per request (a stat; the file again only when it changed). The
// token accepted is either the access token itself (a caller inside the
// sandbox) or the one derived from it for the interpreter
// (internal/accesstoken), which is all spaced ever sends here: its proxy
// checks the SDKs' access token and swaps it, since whatever listens on
// this port must never learn a token that opens the agent.
//
// /execute requires X-Access-Token: it runs code, and the sandbox's ports
// are public by default (E2B's allowPublicTraffic), so whoever knows a
// sandbox's address could otherwise run code in it. The SDKs send the
// token there (envdAccessToken) whenever the sandbox has one.
//
// /executions* require it too: spaced calls them with the derived token.
//
// /contexts* refuse a wrong token (401) but must take a request without
// one. Of E2B's SDKs (read 2026-12: PyPI 2.0.0 to 2.11.5, npm 2.0.0 to
// 2.8.0) only e2b-code-interpreter's sync Sandbox 2.0 to 2.8 sends
// X-Access-Token there; its AsyncSandbox, its sync one from 2.9 (2.11.5
// is pinned here) and every @e2b/code-interpreter (2.8.0 pinned) send at
// most E2B-Traffic-Access-Token, which exists only for a sandbox whose
// ports are private. spaced's proxy turns a valid traffic token into the derived
// access token, so on a private sandbox every SDK call arrives with a
// token; on a public one (E2B's default) the SDKs' context calls carry no
// credential at all, and the server cannot tell the user from anyone who
// knows the sandbox's address. Such anonymous requests (access.go) are
// confined to what they made themselves:
//
//   - GET lists only the contexts anonymous requests made;
//   - restart and delete of any other context (the default ones, those
//     made with a token, by /execute or by spaced's native API) is a 404,
//     as for an unknown id;
//   - POST is capped: MaxAnonymousContexts (-max-anonymous-contexts;
//     by default as many idle Deno kernels, 200 MiB each, as fit in half
//     the sandbox's memory: 2 in 1 GiB) of the MaxContexts
//     (-max-contexts; one per 128 MiB, 8 in 1 GiB) that every caller
//     shares, default contexts included. Past either, a 429 with a JSON
//     body {"error":{"code":"resource_exhausted","message"}}, so that
//     nobody can start kernels until the sandbox runs out of memory
//     (gVisor then kills all of it).
//
// An anonymous caller cannot run code, read output or files: that needs
// /execute and so the token. What it can do is start a few kernels and
// restart or delete the contexts other anonymous callers (the SDK user of
// a public sandbox among them) made. RequireContextToken
// (-require-context-token) closes the routes to requests without a token
// altogether, for templates whose users use SDKs that send it or private
// sandboxes.
//
// Without the state file (-state "") there is no auth at all: that is for
// running the server outside a sandbox (tests, E2B_DEBUG); an unreadable
// state file fails closed (503).
//
// Processes inside the sandbox reach the port on loopback without going
// through the proxy; /execute still needs the token, which is in a
// root-only file. When kernels run as the sandbox's unprivileged user
// (-kernel-user) a cell has that user's rights, which such a process
// already has. code-interpreter-v1 runs them as root, as E2B does (its
// Jupyter server is root's): a context may work in any directory, and a
// cell gains nothing the sandbox's user lacks, who has passwordless sudo
// there.
package interpreter
