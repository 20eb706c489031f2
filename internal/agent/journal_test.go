package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/envd/process"
)

// TestJournal: GET /logs is the agent's own log, with envd's process lines,
// read from a sequence number on; env values never appear in it.
func TestJournal(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	stream, err := ta.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $PROBE; exit 3"}, Envs: map[string]string{"PROBE": "do-not-log-me"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for stream.Receive() {
		if s := stream.Msg().GetEvent().GetStart(); s != nil {
			pid = s.GetPid()
		}
	}
	read := func(after uint64) Logs {
		t.Helper()
		req := newRequest(t, "GET", fmt.Sprintf("%s/logs?after=%d", ta.url, after), nil)
		req.Header.Set(TokenHeader, ta.token)
		resp, body := doHTTP(t, req)
		var l Logs
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if strings.Contains(body, "do-not-log-me") {
			t.Errorf("an env value is in the log: %s", body)
		}
		return l
	}
	var started, ended *LogLine
	deadline := time.Now().Add(5 * time.Second)
	var all Logs
	for ended == nil && time.Now().Before(deadline) {
		all = read(0)
		for i, l := range all.Logs {
			switch l.Message {
			case fmt.Sprintf("Process with pid %d started", pid):
				started = &all.Logs[i]
			case fmt.Sprintf("Process with pid %d ended", pid):
				ended = &all.Logs[i]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if started == nil || ended == nil {
		t.Fatalf("no start and end lines for pid %d: %+v", pid, all.Logs)
	}
	if started.Level != "info" || started.Fields["command"] != "/bin/sh -c echo $PROBE; exit 3" || started.Fields["event_type"] != "process_start" {
		t.Errorf("start line %+v", started)
	}
	if ended.Fields["exit_code"] != "3" || ended.Fields["status"] != "exit status 3" || ended.Seq <= started.Seq {
		t.Errorf("end line %+v", ended)
	}
	if all.Boot == "" {
		t.Error("no boot id")
	}
	if rest := read(started.Seq); len(rest.Logs) == 0 || rest.Logs[0].Seq <= started.Seq || rest.Boot != all.Boot {
		t.Errorf("after %d: %+v", started.Seq, rest)
	}
}

func TestJournalRing(t *testing.T) {
	j := newJournal()
	for i := 0; i < journalSize+10; i++ {
		j.add(LogLine{Message: fmt.Sprint(i)})
	}
	all := j.after(0)
	if len(all) != journalSize || all[0].Message != "10" || all[len(all)-1].Seq != journalSize+10 {
		t.Fatalf("%d lines, first %+v", len(all), all[0])
	}
	if got := j.after(journalSize + 9); len(got) != 1 || got[0].Message != fmt.Sprint(journalSize+9) {
		t.Fatalf("%+v", got)
	}
}
