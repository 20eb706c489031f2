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
