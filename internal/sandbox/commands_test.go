package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// noAgents runs nothing: every sandbox is gone.
type noAgents struct{ asked []string }

func (n *noAgents) Agent(id string) (*AgentConn, error) {
	n.asked = append(n.asked, id)
	return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is killed", id)
}

// TestCommandsAndFilesWithoutASandbox: Commands and Files stand on an
// agent lookup alone; a sandbox that is not running is not_found from
// every method, after asking for that sandbox, and a command with no
// program is refused before anything is asked.
func TestCommandsAndFilesWithoutASandbox(t *testing.T) {
	ctx := context.Background()
	agents := &noAgents{}
	cmds, files := NewCommands(agents, nil), NewFiles(agents)
	for name, call := range map[string]func() error{
		"StartCommand":  func() error { _, err := cmds.StartCommand(ctx, "sb1", CommandSpec{Argv: []string{"true"}}); return err },
		"AttachCommand": func() error { _, err := cmds.AttachCommand(ctx, "sb1", 5, 0); return err },
		"ListCommands":  func() error { _, err := cmds.ListCommands(ctx, "sb1"); return err },
		"SendStdin":     func() error { return cmds.SendStdin(ctx, "sb1", 5, nil) },
		"CloseStdin":    func() error { return cmds.CloseStdin(ctx, "sb1", 5) },
		"SignalCommand": func() error { return cmds.SignalCommand(ctx, "sb1", 5, 9) },
		"StatFile":      func() error { _, err := files.StatFile(ctx, "sb1", "/x"); return err },
		"RemoveFile":    func() error { return files.RemoveFile(ctx, "sb1", "/x") },
		"ListDir":       func() error { _, err := files.ListDir(ctx, "sb1", "/", 1); return err },
		"MakeDir":       func() error { _, err := files.MakeDir(ctx, "sb1", "/d"); return err },
		"MoveFile":      func() error { _, err := files.MoveFile(ctx, "sb1", "/a", "/b"); return err },
		"ReadFile":      func() error { _, err := files.ReadFile(ctx, "sb1", "/x", ""); return err },
		"WriteFile":     func() error { _, err := files.WriteFile(ctx, "sb1", "/x", strings.NewReader("x"), 1); return err },
		"WatchDir":      func() error { _, err := files.WatchDir(ctx, "sb1", "/", false); return err },
	} {
		agents.asked = nil
		if err := call(); errdefs.Class(err) != errdefs.ErrNotFound {
			t.Errorf("%s: %v, want not_found", name, err)
		}
		if len(agents.asked) != 1 || agents.asked[0] != "sb1" {
			t.Errorf("%s asked for %v, want sb1 once", name, agents.asked)
		}
	}
	agents.asked = nil
	if _, err := cmds.StartCommand(ctx, "sb1", CommandSpec{}); errdefs.Class(err) != errdefs.ErrInvalidArgument || len(agents.asked) != 0 {
		t.Errorf("a command with no program: %v after asking %v, want invalid_argument before asking", err, agents.asked)
	}
}
