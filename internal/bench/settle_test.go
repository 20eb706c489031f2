package bench

import (
	"math"
	"testing"
)

func TestParseCPUTimes(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       cpuTimes
		wantErr    bool
	}{
		{"all fields", "cpu  10 1 5 100 4 2 3 0 7 0\ncpu0 1 2 3 4 5\n", cpuTimes{busy: 21, idle: 104}, false},
		{"old kernel, four fields", "cpu 10 1 5 100\n", cpuTimes{busy: 16, idle: 100}, false},
		{"not the cpu line", "intr 1 2 3 4 5\n", cpuTimes{}, true},
		{"garbage", "cpu 10 x 5 100 4\n", cpuTimes{}, true},
		{"empty", "", cpuTimes{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPUTimes(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseCPUTimes(%q) = %+v, %v; want %+v, error %v", tc.stat, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestBusyCoresSince(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur cpuTimes
		cpus      int
		want      float64
	}{
		{"one of two busy", cpuTimes{100, 100}, cpuTimes{200, 200}, 2, 1},
		{"all idle", cpuTimes{100, 100}, cpuTimes{100, 300}, 2, 0},
		{"all busy", cpuTimes{0, 0}, cpuTimes{400, 0}, 4, 4},
		{"no ticks", cpuTimes{5, 5}, cpuTimes{5, 5}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cur.busyCoresSince(tc.prev, tc.cpus); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("busyCoresSince = %v, want %v", got, tc.want)
			}
		})
	}
}
