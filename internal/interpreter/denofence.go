package interpreter

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"strconv"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// denoHookCode is the silent cell a Deno kernel runs when it starts, when
// the server has an output limit: it bounds each execution's console
// output in the kernel and defines the output fence's function.
//
//go:embed hooks/deno.js
var denoHookCode string

// denoHook is that cell for an output limit of limit bytes.
func denoHook(limit int64) string {
	return denoHookCode + "(" + strconv.FormatInt(limit, 10) + ")"
}

// Types of the messages denoFence delivers to a cell's Route: not Jupyter
// types, so they cannot collide with one.
const (
	fenceDoneType   = "space_output_fence"        // the sentinel came: the cell's output is all out
	fenceFailedType = "space_output_fence_failed" // the fence ran without a sentinel (no hook)
)

// denoFence sends a Deno kernel, once it replied to the cell of r and went
// idle, a silent execution that prints a sentinel (a random nonce) through
// the hook's saved print: Deno sends console output from one queue, in
// order, so once the sentinel comes back every output of the cell came
// before it. Output of the cell that the kernel sends after the fence's
// request arrived carries the fence's msg_id, so the fence's Route hands
// its stream messages to r (through r's output limit); the sentinel ends
// as a fenceDoneType message, after a truncatedType one if the hook cut
// the cell's output. A fence that fails (a kernel without the hook)
// delivers fenceFailedType once it is idle. The caller closes the
// returned Route.
func denoFence(k *kernel, r *jupyter.Route) (*jupyter.Route, error) {
	nonce := "space-fence-" + jupyter.NewID() + ":"
	code := `globalThis[Symbol.for("space.fence")](` + strconv.Quote(nonce) + `)`
	mark := func(typ string) {
		r.Forward(&jupyter.Message{Header: jupyter.Header{MsgType: typ}, ParentHeader: jupyter.Header{MsgID: r.ID()}, Channel: jupyter.IOPub})
	}
	failed, done := false, false
	return k.client.Request(jupyter.Shell, "execute_request", executeContent{
		Code: code, Silent: true, UserExpressions: map[string]any{},
	}, func(m *jupyter.Message, _ func(*jupyter.Message)) {
		if m.Channel != jupyter.IOPub {
			return
		}
		switch m.Type() {
		case "stream":
			if !m.Cut && bytes.Contains(m.Content, []byte(nonce)) {
				var c streamContent
				if json.Unmarshal(m.Content, &c) == nil && (c.Text == nonce+"0\n" || c.Text == nonce+"1\n") {
					if c.Text == nonce+"1\n" {
						mark(truncatedType)
					}
					done = true
					mark(fenceDoneType)
					return
				}
			}
			r.Forward(m) // the cell's, late
		case "error":
			failed = true
		case "status":
			var c struct {
				State string `json:"execution_state"`
			}
			if failed && !done && json.Unmarshal(m.Content, &c) == nil && c.State == "idle" {
				mark(fenceFailedType)
			}
		}
	})
}
