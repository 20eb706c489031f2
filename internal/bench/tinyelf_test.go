package bench

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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

// TestSpawnTimer runs the in-sandbox stopwatch on the host: it times as
// many runs as asked, each positive, and marks runs of a program that
// exits non-zero.
func TestSpawnTimer(t *testing.T) {
	timer := spawnTimerELF()
	if timer == nil {
		t.Skip("no spawn timer for this architecture (the bench uses Python's)")
	}
	dir := t.TempDir()
	write := func(name string, img []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, img, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok, _ := tinyELF(0)
	bad, _ := tinyELF(1)
	timerPath, okPath, badPath := write("timer", timer), write("ok", ok), write("bad", bad)
	out, err := exec.Command(timerPath, "7", okPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	s, err := timerSamples(out, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range s {
		if d <= 0 || d > 10*time.Second {
			t.Errorf("run %d took %v", i, d)
		}
	}
	out, err = exec.Command(timerPath, "2", badPath).Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := timerSamples(out, 2); err == nil {
		t.Error("runs of a program that exits 1 were not marked")
	}
	if out, err := exec.Command(timerPath, "2", "/bin/sh", "-c", "exit 0").Output(); err != nil || len(out) != 16 {
		t.Errorf("timer with arguments: %v, %d bytes", err, len(out))
	}
}
