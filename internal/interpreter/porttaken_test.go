package interpreter

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// A kernel that listens on TCP starts again on other ports when another
// process took one of its ports between our pick and its bind (CI once
// saw JJava exit so: "kernel exited while starting"). The first pick
// holds one port under a listener of the test's; the kernel must still
// come up, on the second pick, and run a cell. JJava binds the heartbeat
// port first and exits when it is taken; a taken shell port, bound
// later, leaves the JVM running and never listening (a start that
// waited out its deadline before).
func TestKernelPortTaken(t *testing.T) {
	cases := []struct {
		lang, code, want string
		port             func(*jupyter.ConnInfo) *int
	}{
		{"java", `System.out.println("up")`, "up\n", func(c *jupyter.ConnInfo) *int { return &c.HBPort }},
		{"java", `System.out.println("up")`, "up\n", func(c *jupyter.ConnInfo) *int { return &c.ShellPort }},
		{"javascript", `console.log("up")`, "up\n", func(c *jupyter.ConnInfo) *int { return &c.HBPort }},
		{"javascript", `console.log("up")`, "up\n", func(c *jupyter.ConnInfo) *int { return &c.ShellPort }},
	}
	for _, tc := range cases {
		var picks atomic.Int32
		var taken int
		s := startRJavaServerWith(t, Config{}, func(s *Server) {
			s.launch.pickPorts = func() (jupyter.ConnInfo, error) {
				info, err := jupyter.NewTCP("127.0.0.1")
				if err != nil || picks.Add(1) > 1 {
					return info, err
				}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return info, err
				}
				t.Cleanup(func() { l.Close() })
				taken = l.Addr().(*net.TCPAddr).Port
				*tc.port(&info) = taken
				return info, nil
			}
		})
		id := s.newLangContext(t, tc.lang, "")
		ls := s.execute(t, map[string]any{"code": tc.code, "context_id": id})
		if got := ls.stdout(); got != tc.want {
			t.Errorf("%s with port %d taken: the cell printed %q (last line %s), want %q", tc.lang, taken, got, ls.last(), tc.want)
		}
		if n := picks.Load(); n != 2 {
			t.Errorf("%s: ports picked %d times, want 2 (the taken pick, then one that worked)", tc.lang, n)
		}
	}
}

// A kernel that exits while starting says why in the error: its exit
// status and the last line it wrote (lastLine; it said "see the server
// log" before).
func TestKernelLastLine(t *testing.T) {
	out := &lineLogger{log: testLogger()}
	_, _ = out.Write([]byte("Error: could not load the kernel\n\n"))
	if got := out.lastLine(); got != "Error: could not load the kernel" {
		t.Errorf("lastLine = %q", got)
	}
	_, _ = out.Write([]byte("partial"))
	if got := out.lastLine(); !strings.HasPrefix(got, "partial") {
		t.Errorf("lastLine with a line not ended = %q, want partial", got)
	}
}
