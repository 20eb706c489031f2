package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

// spawnTimer times spawns of argv[2:] inside a sandbox with posix_spawn
// and waitpid (what a static C timer does: clone(VM|VFORK), execve, exit,
// wait; nothing of Python's subprocess module) and prints the median in
// milliseconds. argv[1] is the count.
const spawnTimer = `import os, sys, time
n, argv = int(sys.argv[1]), sys.argv[2:]
runs = []
for i in range(n + 5):
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("%s: wait status %d" % (argv, status))
    if i >= 5:
        runs.append(time.perf_counter() - t)
runs.sort()
print(runs[len(runs) // 2] * 1000)
`

// Where the exec figure's anchor program and the stopwatch are written in
// the sandbox.
const (
	staticTrue     = "/tmp/space-bench-true"
	spawnTimerPath = "/tmp/space-bench-spawn"
)

// execFigures are the exec figure and its anchors, from one sandbox.
type execFigures struct {
	api, staticAPI       Sample
	shSpawn, staticSpawn float64
}

// execLatency times n runs of true through the API in one sandbox; the
// same command (sh -c true) and a tiny static program spawned inside it
// (the anchors); and the static program run through the API.
func execLatency(ctx context.Context, c *client.Client, n int) (*execFigures, error) {
	sb, _, err := create(ctx, c, true)
	if err != nil {
		return nil, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	f := &execFigures{}
	if f.api, err = timeRuns(n, func() error { return runToEnd(ctx, c, sb.ID, "true") }); err != nil {
		return nil, err
	}
	img, err := tinyELF(0)
	if err != nil {
		return nil, err
	}
	if _, err := c.Upload(ctx, sb.ID, staticTrue, bytes.NewReader(img)); err != nil {
		return nil, err
	}
	if _, err := c.Upload(ctx, sb.ID, "/tmp/spawn.py", strings.NewReader(spawnTimer)); err != nil {
		return nil, err
	}
	if err := runToEnd(ctx, c, sb.ID, "chmod 755 "+staticTrue); err != nil {
		return nil, err
	}
	argv := []string{staticTrue}
	if f.staticAPI, err = timeRuns(n, func() error { return runArgvToEnd(ctx, c, sb.ID, argv) }); err != nil {
		return nil, fmt.Errorf("the static program through the API: %w", err)
	}
	timer := spawnTimerELF()
	if timer != nil {
		if _, err := c.Upload(ctx, sb.ID, spawnTimerPath, bytes.NewReader(timer)); err != nil {
			return nil, err
		}
		if err := runToEnd(ctx, c, sb.ID, "chmod 755 "+spawnTimerPath); err != nil {
			return nil, err
		}
	}
	for _, a := range []struct {
		dst  *float64
		argv string
	}{{&f.shSpawn, "/bin/sh -c true"}, {&f.staticSpawn, staticTrue}} {
		if *a.dst, err = spawnP50(ctx, c, sb.ID, timer != nil, n, a.argv); err != nil {
			return nil, fmt.Errorf("spawns of %s inside the sandbox: %w", a.argv, err)
		}
	}
	return f, nil
}

// spawnP50 is the median of n spawns of argv inside sandbox id (after 5
// not counted), timed there by spawnTimerELF, or by Python's posix_spawn
// without it.
func spawnP50(ctx context.Context, c *client.Client, id string, timer bool, n int, argv string) (float64, error) {
	if !timer {
		out, err := runOutput(ctx, c, id, fmt.Sprintf("python3 /tmp/spawn.py %d %s", n, argv))
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			return 0, fmt.Errorf("the timer printed %q", out)
		}
		return round2(v), nil
	}
	out, err := runOutput(ctx, c, id, fmt.Sprintf("%s %d %s", spawnTimerPath, n+5, argv))
	if err != nil {
		return 0, err
	}
	runs, err := timerSamples([]byte(out), n+5)
	if err != nil {
		return 0, err
	}
	return runs[5:].Percentile(50), nil
}

// timerSamples decodes spawnTimerELF's output: want little-endian int64
// nanoseconds, none negative (a run that failed).
func timerSamples(out []byte, want int) (Sample, error) {
	if len(out) != 8*want {
		return nil, fmt.Errorf("the timer wrote %d bytes, want %d", len(out), 8*want)
	}
	s := make(Sample, want)
	for i := range s {
		ns := int64(binary.LittleEndian.Uint64(out[8*i:]))
		if ns < 0 {
			return nil, fmt.Errorf("run %d of the timed program did not exit 0", i)
		}
		s[i] = time.Duration(ns)
	}
	return s, nil
}

// timeRuns times n runs of f after 5 that are not counted (they warm the
// connection and the page cache).
func timeRuns(n int, f func() error) (Sample, error) {
	var s Sample
	for i := range n + 5 {
		start := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		if i >= 5 {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// runArgvToEnd runs argv (no shell) and waits for its end event.
func runArgvToEnd(ctx context.Context, c *client.Client, id string, argv []string) error {
	st, err := c.RunCommand(ctx, id, client.CommandRequest{Argv: argv})
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%v: stream ended without an end event", argv)
		}
		if err != nil {
			return err
		}
		if ev.Type == client.EventEnd {
			if code := ev.Exit.Code(); code != 0 {
				return fmt.Errorf("%v exited %d", argv, code)
			}
			return nil
		}
	}
}
