// Package accesstoken derives the narrower tokens a sandbox's own services
// get from its access token. The access token opens the agent (run
// anything as root in the sandbox); spaced must never send it to a port
// any process in the sandbox could listen on. The code interpreter's port
// gets Interpreter(token) instead, which opens only the interpreter.
package accesstoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Interpreter is the token spaced sends to the code interpreter (port
// 49999) for a sandbox whose access token is token; the interpreter, which
// reads the access token from the agent's root-only state file, derives
// the same.
func Interpreter(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("space-interpreter/v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// Desktop is the token spaced sends to the native computer-use server
// (space-desktop, computeruse.Port) for a sandbox whose access token is
// token: it opens the screen and input of the sandbox's display, not the
// agent.
func Desktop(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("space-desktop/v1"))
	return hex.EncodeToString(m.Sum(nil))
}
