package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/api/envd/process"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
	"github.com/spacesandbox/space/internal/testenv"
)

// TestPID1 runs the agent as PID 1 of a new PID namespace: it must reap
// orphans without breaking the exit statuses of its own processes, keep
// working after Init rotates the token, and exit on SIGTERM.
func TestPID1(t *testing.T) {
	testenv.NeedRoot(t, "a new PID namespace")
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "space-agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	cmd := exec.Command(bin, "--addr", addr, "--state", filepath.Join(dir, "run/state.json"), "--default-user", "root")
	cmd.Env = append(os.Environ(), "SPACE_AGENT_TOKEN=boot")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		testenv.Skipf(t, "cannot create a PID namespace: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	base := "http://" + addr
	waitHealthy(t, base)

	token := "boot"
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r.Header.Set("X-Access-Token", token)
		return http.DefaultTransport.RoundTrip(r)
	})}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent := agentv1connect.NewAgentClient(client, base, connect.WithProtoJSON())
	procs := processconnect.NewProcessClient(client, base, connect.WithProtoJSON())

	// Orphans (the background sleeps) are reparented to PID 1 and reaped; the
	// managed processes still get their own exit statuses.
	for i := 0; i < 3; i++ {
		ex, err := agent.Exec(ctx, connect.NewRequest(&agentv1.ExecRequest{Start: &process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 0.1 & exit 4"}},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		var end *process.ProcessEvent_EndEvent
		for ex.Receive() {
			if e := ex.Msg().GetEvent().GetEnd(); e != nil {
				end = e
			}
		}
		if ex.Err() != nil || end.GetExitCode() != 4 {
			t.Fatalf("end %v err %v", end, ex.Err())
		}
	}
	time.Sleep(300 * time.Millisecond)
	if z := zombieChildren(cmd.Process.Pid); len(z) > 0 {
		t.Errorf("PID 1 left zombies: %v", z)
	}

	// Many short processes with orphans racing the reaper: every exit
	// status must still be the process's own.
	for i := 0; i < 20; i++ {
		ex, err := agent.Exec(ctx, connect.NewRequest(&agentv1.ExecRequest{Start: &process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "(sleep 0.01 &) ; exit " + strconv.Itoa(i%7)}},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		var end *process.ProcessEvent_EndEvent
		for ex.Receive() {
			if e := ex.Msg().GetEvent().GetEnd(); e != nil {
				end = e
			}
		}
		if ex.Err() != nil || end == nil || int(end.GetExitCode()) != i%7 {
			t.Fatalf("run %d: end %v err %v", i, end, ex.Err())
		}
	}
	time.Sleep(300 * time.Millisecond)
	if z := zombieChildren(cmd.Process.Pid); len(z) > 0 {
		t.Errorf("PID 1 left zombies: %v", z)
	}

	// A command that kills a background process, as the E2B Desktop SDK's
	// stream.stop() runs `pkill x11vnc` before its next start() looks
	// for x11vnc with pgrep: the orphan dies at the same moment as the
	// command, and must not stay a zombie behind the command's own
	// (before, it stayed until the reaper's next tick, up to a second).
	// The orphan is killed by its PID: this namespace shares the host's
	// /proc, where pgrep and pkill would see (and aim at) the host's
	// processes by numbers that mean others here.
	run := func(script string) string {
		t.Helper()
		ex, err := agent.Exec(ctx, connect.NewRequest(&agentv1.ExecRequest{Start: &process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for ex.Receive() {
			out = append(out, ex.Msg().GetEvent().GetData().GetStdout()...)
		}
		if ex.Err() != nil {
			t.Fatal(ex.Err())
		}
		return strings.TrimSpace(string(out))
	}
	lingered := 0
	for range 30 {
		pid := run("setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $!")
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("background sleep's pid: %q", pid)
		}
		run("kill -9 " + pid)
		// A zombie reaped at its SIGCHLD is gone within microseconds; one
		// hidden behind the kill command's stays until a tick.
		time.Sleep(100 * time.Millisecond)
		if z := zombieChildren(cmd.Process.Pid); len(z) > 0 {
			lingered++
		}
	}
	if lingered > 0 {
		t.Errorf("in %d of 30 runs a process killed by a command was still a zombie of PID 1 100 ms after the command ended", lingered)
	}

	if _, err := agent.Init(ctx, connect.NewRequest(&agentv1.InitRequest{AccessToken: "rotated"})); err != nil {
		t.Fatal(err)
	}
	token = "rotated"
	if _, err := procs.List(ctx, connect.NewRequest(&process.ListRequest{})); err != nil {
		t.Fatalf("after Init: %v", err)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("PID 1 did not exit on SIGTERM")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
	}
	t.Fatal("agent never became healthy")
}

func zombieChildren(ppid int) []int {
	var out []int
	for _, st := range procStats() {
		if st.ppid == ppid && st.state == "Z" {
			out = append(out, st.pid)
		}
	}
	return out
}

type procStat struct {
	pid, ppid int
	state     string
}

func procStats() []procStat {
	ents, _ := os.ReadDir("/proc")
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, procStat{pid: pid, ppid: ppid, state: f[0]})
	}
	return out
}
