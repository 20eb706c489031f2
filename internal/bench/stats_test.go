package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s Sample
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		p    float64
		want float64
	}{{50, 50}, {90, 90}, {99, 99}, {100, 100}, {1, 1}, {0.1, 1}}
	for _, tt := range tests {
		if got := s.Percentile(tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := (Sample{}).Percentile(50); got != 0 {
		t.Errorf("empty sample = %v", got)
	}
	if got := (Sample{1500 * time.Microsecond}).Percentile(50); got != 1.5 {
		t.Errorf("sub-millisecond rounding = %v", got)
	}
}

// TestRound2: ratios round to two decimals, and a ratio of figures that
// were not measured is 0, which --json can encode.
func TestRound2(t *testing.T) {
	zero := 0.0
	for _, tc := range []struct {
		name string
		v    float64
		want float64
	}{
		{"rounds", 1.23456, 1.23},
		{"0/0", zero / zero, 0},
		{"x/0", 1 / zero, 0},
		{"-x/0", -1 / zero, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := round2(tc.v); got != tc.want {
				t.Errorf("round2(%v) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
}
