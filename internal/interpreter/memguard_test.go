package interpreter

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemoryReserve(t *testing.T) {
	for _, tc := range []struct{ total, want uint64 }{
		{0, 0},
		{256 << 20, 64 << 20},
		{1 << 30, 1 << 30 / 10},
		{8 << 30, 8 << 30 / 10},
	} {
		if got := MemoryReserve(tc.total); got != tc.want {
			t.Errorf("MemoryReserve(%d MiB) = %d, want %d", tc.total>>20, got, tc.want)
		}
	}
}

func TestFamilyRSS(t *testing.T) {
	procs := []procStat{
		{pid: 1, ppid: 0, rss: 1},
		{pid: 10, ppid: 1, rss: 100},   // the kernel
		{pid: 11, ppid: 10, rss: 20},   // a subprocess of a cell
		{pid: 12, ppid: 11, rss: 3},    // its child, in a session of its own
		{pid: 20, ppid: 1, rss: 5000},  // another kernel
		{pid: 21, ppid: 20, rss: 7000}, // its child
	}
	for _, tc := range []struct {
		pid  int
		want uint64
	}{{10, 123}, {11, 23}, {20, 12000}, {99, 0}} {
		if got := familyRSS(procs, tc.pid); got != tc.want {
			t.Errorf("familyRSS(%d) = %d, want %d", tc.pid, got, tc.want)
		}
	}
}

func TestParseAvailable(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       uint64
	}{
		// gVisor: MemAvailable is MemFree; the file cache is the host's.
		{"gvisor", "MemTotal: 1048576 kB\nMemFree: 474220 kB\nMemAvailable: 474220 kB\nActive(file): 58060 kB\nInactive(file): 58064 kB\n", 590344 << 10},
		// Linux: MemAvailable counts what it can reclaim, and is more.
		{"linux", "MemFree: 1000 kB\nMemAvailable: 9000 kB\nActive(file): 2000 kB\nInactive(file): 3000 kB\n", 9000 << 10},
		{"no file lines", "MemFree: 1000 kB\n", 1000 << 10},
	} {
		if got, err := parseAvailable([]byte(tc.info)); err != nil || got != tc.want {
			t.Errorf("%s: %d %v, want %d", tc.name, got, err, tc.want)
		}
	}
	if _, err := parseAvailable([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Error("no MemFree: no error")
	}
}

func TestMeminfoBytes(t *testing.T) {
	info := []byte("MemTotal:        1048576 kB\nMemFree:          987268 kB\nMemAvailable:     987000 kB\n")
	for _, tc := range []struct {
		field string
		want  uint64
		ok    bool
	}{{"MemTotal", 1 << 30, true}, {"MemAvailable", 987000 << 10, true}, {"SwapTotal", 0, false}} {
		if got, ok := meminfoBytes(info, tc.field); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.field, got, ok, tc.want, tc.ok)
		}
	}
}

// The guard, given a sandbox of its own whose free memory is a budget
// less what this process and its kernels hold, kills the kernel whose
// cell fills it, and only that one: the cell says the kernel ran out of
// memory, a big idle context keeps its variable, and the next cell gets
// a new kernel. Without the guard the cell would run on to its RLIMIT_AS
// (1.5 GiB) and fail with MemoryError instead. While no cell runs the
// guard does not read the free memory.
func TestMemoryGuardKillsTheBusyKernel(t *testing.T) {
	held := func() uint64 { return familyRSS(processes(), os.Getpid()) }
	budget := held() + 700<<20
	var reads atomic.Int64
	ts := startServerWith(t, Config{KernelAddressSpace: 1536 << 20, MemoryReserve: 100 << 20}, func(s *Server) {
		s.guard.free = func() (uint64, error) {
			reads.Add(1)
			return budget - min(held(), budget), nil
		}
	})

	if ls := ts.execute(t, map[string]any{"code": "keep = b'k' * (250 << 20)\nprint(len(keep))"}); ls.stdout() != "262144000\n" {
		t.Fatalf("the idle context's variable: %v", ls)
	}
	hog := ts.newContext(t, "")
	ls := ts.execute(t, map[string]any{"context_id": hog, "code": "hog = []\nwhile True:\n    hog.append(b'x' * (8 << 20))"})
	if e := ls.of("error"); len(e) != 1 || !strings.HasPrefix(e[0].str("value"), "the kernel ran out of memory (signal: killed") || ls.last() != "unexpected_end_of_execution" {
		t.Fatalf("the cell that filled the sandbox: %v", ls)
	}
	if ls := ts.execute(t, map[string]any{"code": "print(len(keep))"}); ls.stdout() != "262144000\n" {
		t.Errorf("the idle context after the kill: %v (it was killed instead)", ls)
	}
	if ls := ts.execute(t, map[string]any{"context_id": hog, "code": "1 + 1"}); ls.mainText() != "2" {
		t.Errorf("the next cell on the killed context: %v", ls)
	}
	time.Sleep(100 * time.Millisecond)
	before := reads.Load()
	time.Sleep(300 * time.Millisecond)
	if n := reads.Load() - before; n != 0 {
		t.Errorf("the guard read the free memory %d times in 300 ms with no cell running", n)
	}
	if before == 0 {
		t.Errorf("the guard never read the free memory")
	}
}
