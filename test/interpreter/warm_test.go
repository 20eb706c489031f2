package interpreter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// kernelAgeCell prints how long ago the default context's kernel started,
// in seconds, by the kernel's own record: IPython notes the wall-clock
// time of its session's start (HistoryManager.new_session, at kernel
// start) and keeps it in the kernel's memory, so a kernel restored from
// the template's checkpoint remembers the build's time. gVisor's wall
// clock is the host's, before and after a restore.
const kernelAgeCell = `import datetime, os
_start = get_ipython().history_manager.get_session_info(0)[1]
if not isinstance(_start, datetime.datetime):
    _start = datetime.datetime.fromisoformat(str(_start))
print("%.3f %d" % ((datetime.datetime.now() - _start).total_seconds(), os.getpid()))`

// kernelWarmAtCreate: a sandbox of code-interpreter-v1 has its default
// Python kernel running when the create answers (the template's start
// command started it at build time and the create restored it), not
// started on the first request: before any request reaches the
// interpreter an ipykernel process runs, and the first run_code runs on a
// kernel that started before the create was asked for. The control: a
// restart of that context starts a kernel the same check dates after the
// restart, so the check tells the two apart.
func kernelWarmAtCreate(t *testing.T, d *harness.Daemon) {
	c := d.Client
	asked := time.Now()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "code-interpreter-v1", TimeoutSeconds: 300})
	created := time.Since(asked)

	// Nothing has asked the interpreter for anything yet. (The pattern
	// is written so that this script's own command line does not match.)
	r, err := d.Exec(harness.Ctx(t, time.Minute), sb.ID, client.CommandRequest{User: "root", Cmd: `for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'ipykernel[_]launcher'; then echo ${p#/proc/}; fi
done`})
	if err != nil || r.Exit.Code() != 0 {
		t.Fatalf("list processes: %v %+v", err, r)
	}
	pids := strings.Fields(r.Stdout)
	if len(pids) != 1 {
		t.Fatalf("before any request to the interpreter the sandbox runs %d ipykernels (pids %v), want the default one", len(pids), pids)
	}

	age := func(what string) (float64, string) {
		t.Helper()
		cell := runCell(t, c, sb.ID, client.CodeRequest{Code: kernelAgeCell})
		var age float64
		var pid string
		if _, err := fmt.Sscanf(cell.stdout, "%g %s", &age, &pid); err != nil || cell.err != nil {
			t.Fatalf("%s: the kernel's start time: %v\n%s", what, err, cell)
		}
		t.Logf("%s: the kernel (pid %s) started %.3f s ago; the create was asked %.3f s ago", what, pid, age, time.Since(asked).Seconds())
		return age, pid
	}
	first, pid := age("first run_code")
	if since := time.Since(asked).Seconds(); first <= since {
		t.Errorf("the first run_code ran on a kernel %.3f s old, started after the create was asked (%.3f s ago; the create took %s)",
			first, since, created)
	}
	if pid != pids[0] {
		t.Errorf("the first run_code ran in pid %s, not in the kernel that ran before it (%s)", pid, pids[0])
	}

	// The control: a kernel started now is dated after now.
	// The default contexts, as E2B's: Python's (running) and
	// JavaScript's (its kernel starts with its first cell).
	list, err := c.ListCodeContexts(harness.Ctx(t, time.Minute), sb.ID)
	byLanguage := map[string]string{}
	for _, ctx := range list {
		byLanguage[ctx.Language] = ctx.ID
	}
	if err != nil || len(list) != 2 || byLanguage["python"] == "" || byLanguage["javascript"] == "" {
		t.Fatalf("contexts: %+v %v; want the default python and javascript ones", list, err)
	}
	restarted := time.Now()
	if err := c.RestartCodeContext(harness.Ctx(t, time.Minute), sb.ID, byLanguage["python"]); err != nil {
		t.Fatal(err)
	}
	after, _ := age("after a restart")
	if since := time.Since(restarted).Seconds(); after >= since {
		t.Errorf("the restarted kernel is dated %.3f s old, more than the %.3f s since its restart was asked: the check cannot tell", after, since)
	}
}
