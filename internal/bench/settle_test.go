package bench

import (
	"testing"
	"time"
)

// The /proc/stat reading Settle and the rest bench share: busy is every
// field of the cpu line but idle, iowait and steal (guest time is in user
// already), in USER_HZ ticks of 10 ms.
func TestParseHostBusy(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		wantErr    bool
	}{
		{"all fields", "cpu  10 1 5 100 4 2 3 0 7 0\ncpu0 1 2 3 4 5\n", 210 * time.Millisecond, false},
		{"steal is not busy", "cpu  10 1 5 100 4 2 3 50 0 0\n", 210 * time.Millisecond, false},
		{"too few fields", "cpu 10 1 5 100\n", 0, true},
		{"not the cpu line", "intr 1 2 3 4 5 6 7 8\n", 0, true},
		{"garbage", "cpu 10 x 5 100 4 2 3 0\n", 0, true},
		{"empty", "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHostBusy(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseHostBusy(%q) = %v, %v; want %v, error %v", tc.stat, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
