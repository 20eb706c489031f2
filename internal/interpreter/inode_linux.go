package interpreter

import (
	"os"
	"syscall"
)

// inode tells a replaced file (the agent writes a new one and renames it
// over the old) from one that kept its mtime and size.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
