package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// execution is one POST /execute: a cell on a context's kernel, its output
// turned into NDJSON lines as it comes.
type execution struct {
	code      string
	env       map[string]string
	timeout   time.Duration // 0: none
	globalEnv map[string]string
	globalVer uint64 // agent state version of globalEnv (0: none known)
}

// Timing of an execution. Variables so a test can shorten them.
var (
	keepaliveEvery = 5 * time.Second
	// interruptGrace is how long an interrupted cell has to stop before
	// its kernel is restarted (a C extension may ignore SIGINT).
	interruptGrace = 10 * time.Second
	// replyGrace is how long to wait for execute_reply after the kernel
	// went idle (the reply may come on shell just after), and for IOPub
	// to go quiet after the reply before a fence is sent down it.
	replyGrace = 2 * time.Second
	// foregroundNudge is how long an interrupted bash cell has before its
	// terminal's foreground job gets a SIGINT of its own (see
	// kernel.interruptForeground).
	foregroundNudge = time.Second
	// maxFences unanswered fences end a cell that replied but never said
	// idle.
	maxFences = 5
	// silentLimit bounds the executions we add around a cell.
	silentLimit = 30 * time.Second
	// denoSettle is how long a Deno cell's output must be quiet, after
	// the kernel went idle and replied, before the cell is over, when its
	// output fence (denoFence) cannot tell: the kernel lacks the output
	// hook (hooks/deno.js) or the fence failed. Measured on the host,
	// small late output comes within 10 ms of the reply, 40 ms for a new
	// kernel's first cell; a large one far later, which is why the fence.
	denoSettle = 100 * time.Millisecond
	// fenceWait is how long a Deno cell waits with nothing arriving for
	// its output fence's sentinel before it ends all the same (a kernel
	// that stopped sending without dying).
	fenceWait = 30 * time.Second
)

type executeContent struct {
	Code            string         `json:"code"`
	Silent          bool           `json:"silent"`
	StoreHistory    bool           `json:"store_history"`
	UserExpressions map[string]any `json:"user_expressions"`
	AllowStdin      bool           `json:"allow_stdin"`
	StopOnError     bool           `json:"stop_on_error"`
}

// releaseAfter is the output of a cell past which the server gives its
// free memory back to the sandbox when the cell ends.
const releaseAfter = 8 << 20

// run runs ex on c in the turn of tk (joined when the request came) and
// writes its lines to out. When ctx ends (for /execute, the client left;
// for /executions, an interrupt) the cell is interrupted, and run returns
// only once the kernel is free again, so the next cell finds it idle. If
// ctx ends while the execution waits for its turn, run returns without
// writing an end line.
func (s *Server) run(ctx context.Context, c *kernelContext, tk *ticket, ex execution, out lineSink) {
	if !waitTurn(ctx, tk, out) {
		return // the client left while waiting for its turn
	}
	defer tk.done()
	// The kernel's life is not the request's: a start or a clean-up goes
	// on when the client leaves.
	bg := context.WithoutCancel(ctx)
	k, err := c.kernel(bg)
	if err != nil {
		s.log.Error("no kernel for execution", "context", c.ID, "err", err)
		out.write(errorLine{Type: "error", Name: "KernelError", Value: "could not start the context's kernel: " + err.Error()})
		out.write(markerLine{Type: "end_of_execution"})
		return
	}
	if s.guard != nil {
		defer s.guard.cellRunning(k)()
	}
	if ex.globalVer != 0 && ex.globalVer != c.envVersion {
		if err := s.launch.setEnv(bg, k, envGlobal, ex.globalEnv); err != nil {
			s.log.Warn("could not set the sandbox's env vars in the kernel", "context", c.ID, "err", err)
		} else {
			c.envVersion = ex.globalVer
		}
	}
	if len(ex.env) > 0 {
		if err := s.launch.setEnv(bg, k, envSet, ex.env); err != nil {
			out.write(errorLine{Type: "error", Name: "EnvVarsError", Value: "could not set env_vars: " + err.Error()})
			out.write(markerLine{Type: "end_of_execution"})
			return
		}
		// Restored whatever happens to the cell, unless the kernel died
		// (a new one starts with the sandbox's env only).
		defer func() {
			if k.alive() {
				if err := s.launch.setEnv(bg, k, envRestore, nil); err != nil {
					s.log.Warn("could not restore env vars", "context", c.ID, "err", err)
				}
			}
		}()
	}
	s.cell(ctx, c, k, ex, out)
}

// waitTurn waits for the context's turn, with keepalives meanwhile (a
// failed one is a client gone). It reports whether it got the turn.
func waitTurn(ctx context.Context, tk *ticket, out lineSink) bool {
	t := time.NewTicker(keepaliveEvery)
	defer t.Stop()
	for {
		select {
		case <-tk.ready:
			return true
		case <-ctx.Done():
			tk.leave()
			return false
		case <-t.C:
			if out.write(markerLine{Type: "keepalive"}); out.gone() {
				tk.leave()
				return false
			}
		}
	}
}

// cell runs the user's code and streams its output.
func (s *Server) cell(ctx context.Context, c *kernelContext, k *kernel, ex execution, out lineSink) {
	lim := &outputLimit{max: s.cfg.MaxOutputBytes}
	defer func() {
		// What a big output went through (messages, their JSON, the
		// execution's log) is garbage now; Go would keep the pages for
		// minutes (195 MiB resident seen after two 32 MiB outputs), in
		// the memory the sandbox's kernels share.
		if lim.bytes() >= releaseAfter {
			go debug.FreeOSMemory()
		}
	}()
	r, err := k.client.Request(jupyter.Shell, "execute_request", executeContent{
		Code: ex.code, StoreHistory: true, UserExpressions: map[string]any{}, StopOnError: true,
	}, lim.filter)
	if err != nil {
		// A kernel that died as the cell came (the memory guard killed
		// it, say) says why, as one that dies during the cell does.
		select {
		case <-k.exited:
			st := cellState{out: out, maxOutput: s.cfg.MaxOutputBytes}
			st.kernelGone(k)
			return
		case <-time.After(time.Second):
		}
		out.write(errorLine{Type: "error", Name: "UnexpectedEndOfExecution", Value: "could not send the code to the kernel: " + err.Error()})
		out.write(markerLine{Type: "unexpected_end_of_execution"})
		return
	}
	defer r.Close()

	// wait ends when the cell must be interrupted: the client left (ctx)
	// or the timeout passed. After the interrupt it becomes the grace the
	// cell has to stop.
	wait, cancelWait := ctx, context.CancelFunc(func() {})
	if ex.timeout > 0 {
		wait, cancelWait = context.WithTimeout(ctx, ex.timeout)
	}
	defer func() { cancelWait() }()
	st := cellState{out: out, maxOutput: s.cfg.MaxOutputBytes}
	if k.kind == denoKernel {
		st.settle = denoSettle
	}
	// JJava's reply carries its own stack, not the cell's, and may come
	// before the IOPub error that has the cell's.
	st.iopubErrors = k.kind == javaKernel
	var fence *jupyter.Route // see the reply without idle, below
	fences := 0
	defer func() {
		if fence != nil {
			fence.Close()
		}
	}()
	interrupted := false
	var nudgeAt time.Time // when an interrupted bash cell's job gets its own SIGINT
	interrupt := func() {
		interrupted = true
		if k.kind == bashKernel {
			nudgeAt = time.Now().Add(foregroundNudge)
		}
		st.timedOut = ctx.Err() == nil && !out.gone()
		s.log.Info("interrupting a cell", "context", c.ID, "timed_out", st.timedOut)
		if err := k.interrupt(); err != nil {
			s.log.Warn("interrupt failed", "context", c.ID, "err", err)
		}
		cancelWait()
		wait, cancelWait = context.WithTimeout(context.WithoutCancel(ctx), interruptGrace)
	}

	var outFence *jupyter.Route // Deno's output fence, below
	defer func() {
		if outFence != nil {
			outFence.Close()
		}
	}()
	for !st.done() {
		if out.gone() && !interrupted {
			interrupt() // a failed write is the other sign of a client gone
		}
		d := keepaliveEvery
		if !nudgeAt.IsZero() {
			if d = min(d, time.Until(nudgeAt)); d <= 0 {
				k.interruptForeground()
				nudgeAt, d = time.Time{}, keepaliveEvery
			}
		}
		if !st.idleAt.IsZero() && !st.replied {
			if d = min(d, time.Until(st.idleAt.Add(replyGrace))); d <= 0 {
				break // idle long enough: the reply is not coming
			}
		}
		if st.replied && !st.idleAt.IsZero() {
			// Deno's kernel says idle and replies before all of the cell's
			// output is out (its console output reaches IOPub later, from a
			// queue of its own): the cell is over when its output fence's
			// sentinel, sent through that queue, came back.
			if outFence == nil {
				if outFence, err = denoFence(k, r); err != nil {
					st.kernelGone(k)
					return
				}
				st.lastAt = time.Now()
			}
			wait := fenceWait
			if !st.fenceFailedAt.IsZero() {
				wait = st.settle // no sentinel is coming: output quiet is all we have
			}
			if d = min(d, time.Until(st.lastAt.Add(wait))); d <= 0 {
				if st.fenceFailedAt.IsZero() {
					s.log.Warn("a Deno cell's output fence never came back; ending the cell", "context", c.ID)
				}
				break
			}
		}
		if st.replied && st.idleAt.IsZero() {
			// The kernel's IOPub socket drops messages when its queue to us
			// is full (a flood while we were slow): an idle status lost so
			// would hold the cell forever. But the reply also comes well
			// ahead of a large output still on its way (megabytes of
			// stdout read slowly on a busy machine). So once replied and
			// quiet a while, a fence goes down IOPub behind whatever is
			// still coming: if it arrives and the idle has not, the idle
			// was dropped and the cell is over. A fence may be dropped too:
			// after maxFences unanswered ones the cell ends all the same.
			if st.fenced || fences == maxFences {
				s.log.Warn("the kernel replied but never said idle; ending the cell", "context", c.ID, "fenced", st.fenced)
				break
			}
			if d = min(d, time.Until(st.lastAt.Add(replyGrace))); d <= 0 {
				if fence != nil {
					fence.Close()
				}
				if fence, err = k.client.Fence(r); err != nil {
					st.kernelGone(k)
					return
				}
				fences++
				st.lastAt, d = time.Now(), replyGrace
			}
		}
		m, err := r.Recv(wait, d)
		switch {
		case err != nil && wait.Err() != nil && !interrupted:
			interrupt()
		case err != nil && wait.Err() != nil:
			s.log.Warn("interrupted cell did not stop; restarting the kernel", "context", c.ID, "grace", interruptGrace)
			c.stop(endRestart)
			st.sendError(errorLine{Type: "error", Name: "ContextRestarting",
				Value: "the cell did not stop when interrupted, so the context's kernel was restarted"})
			out.write(markerLine{Type: "end_of_execution"})
			return
		case err != nil:
			st.kernelGone(k)
			return
		case m == nil:
			if st.idleAt.IsZero() || outFence != nil {
				out.write(markerLine{Type: "keepalive"})
			}
		default:
			st.lastAt = time.Now()
			st.handle(m)
		}
	}
	st.finish(ex.timeout)
}

// cellState follows one cell's messages.
type cellState struct {
	out       lineSink
	maxOutput int64
	timedOut  bool
	errSent   bool
	pending   *errorLine // a KeyboardInterrupt held back while timedOut
	replied   bool
	idleAt    time.Time
	lastAt    time.Time // the last message for the cell
	// settle is set for Deno's cells, which end on their output fence
	// (denoFence): how long output must be quiet after a failed fence.
	settle        time.Duration
	fenceDone     bool      // the output fence's sentinel came: all output is out
	fenceFailedAt time.Time // the output fence ran without its sentinel
	fenced        bool      // a Fence came through IOPub after the reply
	// iopubErrors: the reply's error counts only if IOPub had none
	// (held in replyErr until the end).
	iopubErrors bool
	replyErr    json.RawMessage
}

// done reports whether the kernel is done with the cell: it went idle
// (after which it publishes nothing more for it) and replied, and for
// Deno its output is all out.
func (st *cellState) done() bool {
	return st.replied && !st.idleAt.IsZero() && (st.settle == 0 || st.fenceDone)
}

// handle writes what m means.
func (st *cellState) handle(m *jupyter.Message) {
	switch m.Type() {
	case "status":
		var c struct {
			State string `json:"execution_state"`
		}
		if json.Unmarshal(m.Content, &c) == nil && c.State == "idle" && m.Channel == jupyter.IOPub {
			st.idleAt = time.Now()
		}
	case "execute_input":
		var c struct {
			Count int `json:"execution_count"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			st.out.write(countLine{Type: "number_of_executions", ExecutionCount: c.Count})
		}
	case "stream":
		var c streamContent
		if json.Unmarshal(m.Content, &c) == nil && (c.Name == "stdout" || c.Name == "stderr") {
			st.out.write(streamLine{Type: c.Name, Text: c.Text, Timestamp: m.Header.Date})
		}
	case "execute_result", "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			st.out.write(newResult(c.Data, m.Type() == "execute_result"))
		}
	case "error":
		st.error(m.Content)
	case "execute_reply":
		if m.Channel != jupyter.Shell {
			return
		}
		st.replied = true
		var c struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			switch c.Status {
			case "error":
				if st.iopubErrors {
					st.replyErr = m.Content
					break
				}
				st.error(m.Content)
			case "abort", "aborted":
				// bash_kernel's answer to an interrupt; a timeout says so
				// itself at the end.
				if !st.timedOut {
					st.sendError(errorLine{Type: "error", Name: "ExecutionAborted", Value: "Execution was aborted"})
				}
			}
		}
	case jupyter.FenceType:
		st.fenced = true
	case fenceDoneType:
		st.fenceDone = true
	case fenceFailedType:
		st.fenceFailedAt = time.Now()
	case truncatedType:
		st.out.write(streamLine{Type: "stderr", Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
			Text: fmt.Sprintf("\n[output truncated: this execution's output passed %d bytes; the rest was dropped]\n", st.maxOutput)})
	}
}

// error sends the cell's error once (iopub's error and execute_reply's
// carry the same one).
func (st *cellState) error(content json.RawMessage) {
	var c struct {
		Name      string   `json:"ename"`
		Value     string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	}
	if json.Unmarshal(content, &c) != nil {
		return
	}
	if c.Name == "" {
		// bash_kernel names no error: its value is the exit status of
		// the cell's last command (or a message).
		c.Name = "Error"
		if _, err := strconv.Atoi(c.Value); err == nil {
			c.Name = "ExitStatus"
		}
	}
	line := errorLine{Type: "error", Name: c.Name, Value: c.Value, Traceback: joinTraceback(c.Traceback)}
	if st.timedOut {
		// Our interrupt's doing (Python's KeyboardInterrupt, Deno's
		// "Execution failed"), not the user's: say it was the timeout,
		// keeping the traceback that shows where the cell was.
		st.pending = &line
		return
	}
	st.sendError(line)
}

func (st *cellState) sendError(line errorLine) {
	if st.errSent {
		return
	}
	st.errSent = true
	st.out.write(line)
}

func (st *cellState) finish(timeout time.Duration) {
	if st.replyErr != nil && !st.errSent && st.pending == nil {
		st.error(st.replyErr)
	}
	if st.timedOut {
		line := errorLine{Type: "error", Name: "TimeoutError",
			Value: fmt.Sprintf("Execution timed out after %s and was interrupted", timeout)}
		if st.pending != nil {
			line.Traceback = st.pending.Traceback
		}
		st.sendError(line)
	}
	st.out.write(markerLine{Type: "end_of_execution"})
}

// kernelGone reports a kernel that went away during the cell.
func (st *cellState) kernelGone(k *kernel) {
	var value string
	switch endReason(k.ended.Load()) {
	case endRestart:
		st.sendError(errorLine{Type: "error", Name: "ContextRestarting", Value: "Context was restarted"})
		st.out.write(markerLine{Type: "end_of_execution"})
		return
	case endDelete:
		value = "the context was deleted during the execution"
	default:
		<-k.exited
		died := "exited"
		if k.outOfMemory() {
			died = "ran out of memory"
		}
		value = fmt.Sprintf("the kernel %s (%s) before the execution finished; a new one starts with the next execution", died, k.exitStatus())
	}
	st.sendError(errorLine{Type: "error", Name: "UnexpectedEndOfExecution", Value: value})
	st.out.write(markerLine{Type: "unexpected_end_of_execution"})
}

// runSilent runs code the user does not see (no output, no execution
// count, no history) and returns its error, if any.
func runSilent(ctx context.Context, k *kernel, code string) error {
	ctx, cancel := context.WithTimeout(ctx, silentLimit)
	defer cancel()
	r, err := k.client.Request(jupyter.Shell, "execute_request", executeContent{
		Code: code, Silent: true, UserExpressions: map[string]any{},
	}, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	var replied, idle bool
	var failure error
	for !(replied && idle) {
		m, err := r.Recv(ctx, 0)
		if err != nil {
			return fmt.Errorf("silent execution: %w", err)
		}
		switch {
		case m.Type() == "execute_reply" && m.Channel == jupyter.Shell:
			replied = true
			var c struct {
				Status string `json:"status"`
				Name   string `json:"ename"`
				Value  string `json:"evalue"`
			}
			if json.Unmarshal(m.Content, &c) == nil && c.Status != "ok" {
				failure = fmt.Errorf("%s: %s: %s", c.Status, c.Name, c.Value)
			}
		case m.Type() == "status" && m.Channel == jupyter.IOPub:
			var c struct {
				State string `json:"execution_state"`
			}
			idle = idle || json.Unmarshal(m.Content, &c) == nil && c.State == "idle"
		}
	}
	return failure
}
