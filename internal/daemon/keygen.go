package daemon

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"github.com/spacesandbox/space/internal/seal"
)

// Keygen is `spaced keygen FILE`: a fresh platform key for the nodes of a
// cluster to share (FILE "-" writes it to stdout, for a Secret). spaced
// makes its own at the first start when the file is missing, which serves
// one node; nodes sharing an object store need this one key.
func Keygen(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: spaced keygen FILE (or - for stdout)")
	}
	if args[0] != "-" {
		return seal.NewPlatformKey(args[0])
	}
	dir, err := os.MkdirTemp("", "space-keygen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "platform.json")
	if err := seal.NewPlatformKey(path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
