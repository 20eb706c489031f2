package client

import (
	"testing"
)

func TestDecodeEvent(t *testing.T) {
	tests := []struct {
		name     string
		in       sseEvent
		wantType string
		wantID   uint64
		wantData string
		wantPID  int
		wantExit *ExitInfo
		wantErr  bool
	}{
		{name: "text", in: sseEvent{HasID: true, ID: "2", Event: "stdout", Data: `{"text":"héllo\n"}`}, wantType: "stdout", wantID: 2, wantData: "héllo\n"},
		{name: "base64", in: sseEvent{HasID: true, ID: "3", Event: "stderr", Data: `{"base64":"AP8="}`}, wantType: "stderr", wantID: 3, wantData: "\x00\xff"},
		{name: "start", in: sseEvent{HasID: true, ID: "1", Event: "start", Data: `{"pid":42}`}, wantType: "start", wantID: 1, wantPID: 42, wantData: `{"pid":42}`},
		{name: "end", in: sseEvent{HasID: true, ID: "9", Event: "end", Data: `{"exit_code":3,"exited":true,"status":"exit status 3"}`}, wantType: "end", wantID: 9,
			wantData: `{"exit_code":3,"exited":true,"status":"exit status 3"}`, wantExit: &ExitInfo{ExitCode: 3, Exited: true, Status: "exit status 3"}},
		{name: "gap keeps raw data", in: sseEvent{HasID: true, ID: "5", Event: "gap", Data: `{"dropped":10}`}, wantType: "gap", wantID: 5, wantData: `{"dropped":10}`},
		{name: "pty output", in: sseEvent{HasID: true, ID: "4", Event: "pty", Data: `{"text":"$ "}`}, wantType: "pty", wantID: 4, wantData: "$ "},
		{name: "inherited id is not the event's", in: sseEvent{ID: "4", Event: "gap", Data: `{"dropped":3}`}, wantType: "gap", wantData: `{"dropped":3}`},
		{name: "bad id", in: sseEvent{HasID: true, ID: "x", Event: "stdout", Data: `{"text":""}`}, wantErr: true},
		{name: "bad base64", in: sseEvent{HasID: true, ID: "1", Event: "stdout", Data: `{"base64":"!!"}`}, wantErr: true},
		{name: "bad json", in: sseEvent{HasID: true, ID: "1", Event: "end", Data: `{`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := decodeEvent(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if ev.Type != tt.wantType || ev.ID != tt.wantID || string(ev.Data) != tt.wantData || ev.PID != tt.wantPID {
				t.Errorf("got %+v (data %q)", ev, ev.Data)
			}
			if (ev.Exit == nil) != (tt.wantExit == nil) || (ev.Exit != nil && *ev.Exit != *tt.wantExit) {
				t.Errorf("exit = %+v, want %+v", ev.Exit, tt.wantExit)
			}
		})
	}
}

func TestExitInfoCode(t *testing.T) {
	tests := []struct {
		in   ExitInfo
		want int
	}{
		{ExitInfo{ExitCode: 0, Exited: true, Status: "exit status 0"}, 0},
		{ExitInfo{ExitCode: 7, Exited: true, Status: "exit status 7"}, 7},
		{ExitInfo{ExitCode: -1, Status: "signal: killed"}, 137},
		{ExitInfo{ExitCode: -1, Status: "signal: terminated"}, 143},
		{ExitInfo{ExitCode: -1, Status: "signal: segmentation fault (core dumped)"}, 139},
		{ExitInfo{ExitCode: -1, Status: "signal 2"}, 130},
		{ExitInfo{ExitCode: -1, Status: "SIGHUP"}, 129},
		{ExitInfo{ExitCode: -1, Status: "something odd"}, 1},
		{ExitInfo{ExitCode: 0, Exited: false, Error: "timed out"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.in.Status, func(t *testing.T) {
			if got := tt.in.Code(); got != tt.want {
				t.Errorf("Code() = %d, want %d", got, tt.want)
			}
		})
	}
}
