package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// terminalFD returns the descriptor of r when it is a terminal.
func terminalFD(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

func isTerminal(r io.Reader) bool {
	_, ok := terminalFD(r)
	return ok
}
