package bench

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTinyELF runs the anchor's program on the host: it must be a valid
// executable that exits with the code it was built with (3 here, so a
// program that did nothing, or crashed, fails).
func TestTinyELF(t *testing.T) {
	for _, code := range []byte{0, 3} {
		img, err := tinyELF(code)
		if err != nil {
			t.Skip(err) // an architecture without one: the bench says so too
		}
		if len(img) > 256 {
			t.Errorf("the program is %d bytes; it should be tiny", len(img))
		}
		path := filepath.Join(t.TempDir(), "true")
		if err := os.WriteFile(path, img, 0o755); err != nil {
			t.Fatal(err)
		}
		err = exec.Command(path).Run()
		var exit *exec.ExitError
		switch {
		case code == 0 && err != nil:
			t.Errorf("exit 0 program: %v", err)
		case code != 0 && (!errors.As(err, &exit) || exit.ExitCode() != int(code)):
			t.Errorf("exit %d program: %v", code, err)
		}
	}
}
