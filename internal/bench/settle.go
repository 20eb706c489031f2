package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// QuietCores is how busy the host may be (in cores, over a second) for
// Settle to call it quiet: spaced and a few idle sandboxes, not the
// teardown of a previous run's hundreds.
const QuietCores = 0.25

// Settle waits, for at most max, until the host's CPUs were busy for less
// than QuietCores over one second, and says on log how long that took. A
// run started right after another (or after spaced's restart) would
// otherwise measure the previous run's teardown: its figures scatter by
// more than the differences they are meant to show. It returns the last
// second's busy cores; past max it goes on and says so.
func Settle(ctx context.Context, max time.Duration, log io.Writer) (float64, error) {
	if max <= 0 {
		return 0, nil
	}
	start := time.Now()
	prev, err := readCPUTimes()
	if err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
		cur, err := readCPUTimes()
		if err != nil {
			return 0, err
		}
		busy := cur.busyCoresSince(prev, runtime.NumCPU())
		prev = cur
		waited := time.Since(start).Round(100 * time.Millisecond)
		switch {
		case busy < QuietCores:
			fmt.Fprintf(log, "host quiet after %s (%.2f cores busy)\n", waited, busy)
			return busy, nil
		case time.Since(start) >= max:
			fmt.Fprintf(log, "host still busy after %s (%.2f cores): measuring anyway\n", waited, busy)
			return busy, nil
		}
	}
}

// cpuTimes is the first ("cpu") line of /proc/stat: ticks spent busy and
// idle (idle and iowait) over all CPUs since boot.
type cpuTimes struct{ busy, idle uint64 }

func readCPUTimes() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("read the host's CPU times: %w", err)
	}
	return parseCPUTimes(string(data))
}

func parseCPUTimes(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat does not start with the cpu line: %q", line)
	}
	var t cpuTimes
	// user nice system idle iowait irq softirq steal (guest and guest_nice
	// are already counted in user and nice).
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat cpu line field %d: %w", i+1, err)
		}
		if i == 3 || i == 4 {
			t.idle += v
		} else {
			t.busy += v
		}
	}
	return t, nil
}

// busyCoresSince is how many of cpus were busy on average since prev.
func (t cpuTimes) busyCoresSince(prev cpuTimes, cpus int) float64 {
	busy, idle := t.busy-prev.busy, t.idle-prev.idle
	if busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle) * float64(cpus)
}
