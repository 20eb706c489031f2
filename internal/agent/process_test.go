package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/internal/testenv"
)

func TestStartEnds(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	tests := []struct {
		name     string
		cfg      *process.ProcessConfig
		stdout   string
		stderr   string
		exitCode int32
		exited   bool
		status   string
		errMsg   string
	}{
		{name: "echo", cfg: &process.ProcessConfig{Cmd: "echo", Args: []string{"hi"}}, stdout: "hi\n", exited: true, status: "exit status 0"},
		{name: "stderr and exit 3", cfg: shell("echo oops >&2; exit 3"), stderr: "oops\n", exitCode: 3, exited: true, status: "exit status 3", errMsg: "exit status 3"},
		{name: "killed", cfg: shell("kill -9 $$"), exitCode: -1, status: "signal: killed", errMsg: "signal: killed"},
		{name: "request env overrides", cfg: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $A-$USER"}, Envs: map[string]string{"A": "x", "USER": "u"}}, stdout: "x-u\n", exited: true, status: "exit status 0"},
		{name: "cwd", cfg: &process.ProcessConfig{Cmd: "pwd", Cwd: ptr("/tmp")}, stdout: "/tmp\n", exited: true, status: "exit status 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := ta.proc.Start(ctxTimeout(t, 10*time.Second), connect.NewRequest(&process.StartRequest{Process: tt.cfg, Stdin: ptr(false)}))
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, stream)
			if r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
			if r.end.GetExitCode() != tt.exitCode || r.end.GetExited() != tt.exited || r.end.GetStatus() != tt.status || r.end.GetError() != tt.errMsg {
				t.Errorf("end = %v", r.end)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	tests := []struct {
		name string
		user string
		cfg  *process.ProcessConfig
		code connect.Code
	}{
		{name: "unknown user", user: "no-such-user-xyz", cfg: shell("true"), code: connect.CodeUnauthenticated},
		{name: "missing cwd", cfg: &process.ProcessConfig{Cmd: "true", Cwd: ptr("/no/such/dir")}, code: connect.CodeInvalidArgument},
		{name: "missing cmd", cfg: &process.ProcessConfig{Cmd: "no-such-binary-xyz"}, code: connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := connect.NewRequest(&process.StartRequest{Process: tt.cfg})
			if tt.user != "" {
				req.Header().Set("Authorization", basicUser(tt.user))
			}
			stream, err := ta.proc.Start(ctxTimeout(t, 5*time.Second), req)
			if err == nil {
				for stream.Receive() {
				}
				err = stream.Err()
			}
			if connect.CodeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
		})
	}
}

func TestUserSwitch(t *testing.T) {
	testenv.NeedRoot(t, "switches users")
	ta := newTestAgent(t, agentOpts{})
	req := connect.NewRequest(&process.StartRequest{Process: shell("id -un; echo $HOME $USER $LOGNAME; env | cut -d= -f1 | sort | tr '\\n' ' '")})
	req.Header().Set("Authorization", basicUser("nobody"))
	stream, err := ta.proc.Start(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, stream)
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 3 || lines[0] != "nobody" || lines[1] != "/nonexistent nobody nobody" {
		t.Fatalf("stdout = %q", r.stdout)
	}
	for _, k := range strings.Fields(lines[2]) {
		switch k {
		case "PATH", "HOME", "USER", "LOGNAME", "PWD", "SHLVL", "_":
		default:
			t.Errorf("unexpected env var %s (agent env leaked?)", k)
		}
	}
}

func TestStdin(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}, Tag: ptr("cat")}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}

	list, err := ta.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.GetProcesses()) != 1 || list.Msg.GetProcesses()[0].GetTag() != "cat" || list.Msg.GetProcesses()[0].GetPid() != pid {
		t.Errorf("list = %v", list.Msg)
	}

	for _, s := range []string{"hello ", "world"} {
		if _, err := ta.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ta.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	var out string
	var end *process.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out += string(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			end = ev.GetEnd()
		}
	}
	if out != "hello world" || end == nil || end.GetExitCode() != 0 {
		t.Fatalf("out %q end %v err %v", out, end, stream.Err())
	}

	// stdin=false: cat reads /dev/null and ends at once.
	s2, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "cat"}, Stdin: ptr(false)}))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, s2); r.stdout != "" || r.end.GetExitCode() != 0 {
		t.Fatalf("cat without stdin: %+v", r)
	}
}

func TestTimeoutKills(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})

	// Connect-Timeout-Ms bounds a Start's process.
	ctx := ctxTimeout(t, 10*time.Second)
	// The client turns the context deadline into Connect-Timeout-Ms.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	stream, err := ta.proc.Start(short, connect.NewRequest(&process.StartRequest{Process: shell("sleep 30"), Tag: ptr("sleeper")}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if c := connect.CodeOf(stream.Err()); c != connect.CodeDeadlineExceeded {
		t.Fatalf("stream err = %v", stream.Err())
	}
	conn, err := ta.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "sleeper"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, conn); r.end.GetStatus() != "signal: killed" {
		t.Fatalf("end = %v", r.end)
	}

	// Exec's timeout_ms does the same and the stream gets the end event.
	ex, err := ta.agent.Exec(ctx, connect.NewRequest(&agentv1.ExecRequest{Start: &process.StartRequest{Process: shell("sleep 30")}, TimeoutMs: 200}))
	if err != nil {
		t.Fatal(err)
	}
	var end *process.ProcessEvent_EndEvent
	for ex.Receive() {
		end = ex.Msg().GetEvent().GetEnd()
	}
	if ex.Err() != nil || end.GetStatus() != "signal: killed" || end.GetExitCode() != -1 || end.GetExited() {
		t.Fatalf("exec end = %v, err %v", end, ex.Err())
	}
}

func TestSignalKillsGroup(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	tests := []struct {
		name   string
		signal process.Signal
		status string
	}{
		{"sigterm", process.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{"sigkill", process.Signal_SIGNAL_SIGKILL, "signal: killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: shell("sleep 30 & echo $!; wait")}))
			if err != nil {
				t.Fatal(err)
			}
			var pid uint32
			var out string
			for !strings.Contains(out, "\n") && stream.Receive() {
				ev := stream.Msg().GetEvent()
				if ev.GetStart() != nil {
					pid = ev.GetStart().GetPid()
				}
				out += string(ev.GetData().GetStdout())
			}
			child, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				t.Fatalf("child pid %q: %v", out, err)
			}
			if _, err := ta.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: tt.signal})); err != nil {
				t.Fatal(err)
			}
			var end *process.ProcessEvent_EndEvent
			for stream.Receive() {
				if e := stream.Msg().GetEvent().GetEnd(); e != nil {
					end = e
				}
			}
			if end.GetStatus() != tt.status {
				t.Errorf("end = %v", end)
			}
			waitGone(t, child)
		})
	}

	_, err := ta.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 999999}}, Signal: process.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "process with pid 999999 not found") {
		t.Fatalf("unknown pid: %v", err)
	}
}

// waitGone waits until pid no longer runs (gone or a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("child %d of the process group survived the signal", pid)
}

func TestPTY(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh", Envs: map[string]string{"TERM": "xterm-256color", "PS1": "$ "}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
	send := func(s string) {
		t.Helper()
		if _, err := ta.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(out, want) {
			if !stream.Receive() {
				t.Fatalf("stream ended before %q; got %q (%v)", want, out, stream.Err())
			}
			ev := stream.Msg().GetEvent()
			if ev.GetData().GetStdout() != nil {
				t.Fatalf("pty output came as stdout")
			}
			out += string(ev.GetData().GetPty())
		}
	}
	send("echo term=$TERM; stty size\n")
	waitFor("24 80")
	if !strings.Contains(out, "term=xterm-256color") {
		t.Errorf("TERM not passed: %q", out)
	}
	if _, err := ta.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatal(err)
	}
	send("stty size; exit 7\n")
	waitFor("30 100")
	var end *process.ProcessEvent_EndEvent
	for stream.Receive() {
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end.GetExitCode() != 7 {
		t.Fatalf("end = %v err %v", end, stream.Err())
	}
	// As envd, which forgets a process when it ends: resizing, writing to
	// or signalling it is not_found, though Connect can still replay it.
	pid := sel.GetPid()
	want := fmt.Sprintf("process with pid %d not found", pid)
	_, err = ta.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 10, Rows: 10}}}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), want) {
		t.Errorf("resize of an ended pty: %v", err)
	}
	_, err = ta.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("x")}}}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), want) {
		t.Errorf("input to an ended pty: %v", err)
	}

	// A process without a pty cannot be resized (envd's text).
	plain, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: shell("sleep 5")}))
	if err != nil || !plain.Receive() {
		t.Fatal(err, plain.Err())
	}
	defer plain.Close()
	psel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: plain.Msg().GetEvent().GetStart().GetPid()}}
	_, err = ta.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: psel, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 10, Rows: 10}}}))
	if err == nil || !strings.Contains(err.Error(), "error resizing tty: tty not assigned to process") {
		t.Errorf("resize without a pty: %v", err)
	}
	_, _ = ta.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: psel, Signal: process.Signal_SIGNAL_SIGKILL}))
}

func TestReconnect(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: shell("echo a; sleep 0.3; echo b"), Tag: ptr("job")}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	tests := []struct {
		name string
		sel  *process.ProcessSelector
	}{
		{"pid", &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}},
		{"tag", &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "job"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := ta.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: tt.sel}))
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, conn)
			if r.pid != pid || r.stdout != "a\nb\n" || r.end.GetStatus() != "exit status 0" {
				t.Fatalf("reconnect got %+v", r)
			}
		})
	}
	// After the end, the process is still there to reconnect to.
	conn, err := ta.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: tests[0].sel}))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, conn); r.stdout != "a\nb\n" {
		t.Fatalf("after end: %+v", r)
	}
	_, err = ta.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "nope"}}}))
	if err == nil {
		conn, _ := ta.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "nope"}}}))
		conn.Receive()
		err = conn.Err()
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown tag: %v", err)
	}
}

func execAll(t *testing.T, ta *testAgent, script string) []*agentv1.ExecEvent {
	t.Helper()
	ex, err := ta.agent.Exec(ctxTimeout(t, 10*time.Second), connect.NewRequest(&agentv1.ExecRequest{Start: &process.StartRequest{Process: shell(script), Stdin: ptr(false)}}))
	if err != nil {
		t.Fatal(err)
	}
	var evs []*agentv1.ExecEvent
	for ex.Receive() {
		evs = append(evs, ex.Msg())
	}
	if ex.Err() != nil {
		t.Fatal(ex.Err())
	}
	return evs
}

func TestAttachAfterSeq(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	evs := execAll(t, ta, "for i in 1 2 3 4 5; do echo $i; sleep 0.02; done")
	for i, e := range evs {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.GetSeq())
		}
	}
	if len(evs) < 4 || evs[len(evs)-1].GetEvent().GetEnd() == nil {
		t.Fatalf("events: %v", evs)
	}
	pid := evs[0].GetEvent().GetStart().GetPid()
	for after := 0; after <= len(evs); after++ {
		at, err := ta.agent.Attach(ctxTimeout(t, 5*time.Second), connect.NewRequest(&agentv1.AttachRequest{
			Process:  &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
			AfterSeq: uint64(after),
		}))
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for at.Receive() {
			if at.Msg().GetDropped() != 0 {
				t.Errorf("after %d: dropped %d", after, at.Msg().GetDropped())
			}
			got = append(got, at.Msg().GetSeq())
		}
		if at.Err() != nil {
			t.Fatal(at.Err())
		}
		if len(got) != len(evs)-after {
			t.Fatalf("after %d: got seqs %v", after, got)
		}
		for i, s := range got {
			if s != uint64(after+1+i) {
				t.Fatalf("after %d: got seqs %v", after, got)
			}
		}
	}
}

func TestBufferDropsOldest(t *testing.T) {
	ta := newTestAgent(t, agentOpts{bufferBytes: 100})
	evs := execAll(t, ta, "for i in $(seq 1 20); do echo line-$i-0123456789; sleep 0.01; done")
	pid := evs[0].GetEvent().GetStart().GetPid()
	at, err := ta.agent.Attach(ctxTimeout(t, 5*time.Second), connect.NewRequest(&agentv1.AttachRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []*agentv1.ExecEvent
	for at.Receive() {
		got = append(got, at.Msg())
	}
	if at.Err() != nil {
		t.Fatal(at.Err())
	}
	if got[0].GetEvent().GetStart() == nil || got[len(got)-1].GetEvent().GetEnd() == nil {
		t.Fatalf("start or end dropped: %v", got)
	}
	var data int
	var out string
	for _, e := range got[1 : len(got)-1] {
		data += len(e.GetEvent().GetData().GetStdout())
		out += string(e.GetEvent().GetData().GetStdout())
	}
	if data > 100 || !strings.HasSuffix(out, "line-20-0123456789\n") {
		t.Fatalf("kept %d bytes: %q", data, out)
	}
	want := got[1].GetSeq() - 2 // seqs 2..first kept-1 were dropped
	if got[1].GetDropped() != want || want == 0 {
		t.Fatalf("dropped = %d, want %d", got[1].GetDropped(), want)
	}
	if uint64(len(got))+want != uint64(len(evs)) {
		t.Fatalf("attach got %d events + %d dropped, exec had %d", len(got), want, len(evs))
	}
}
