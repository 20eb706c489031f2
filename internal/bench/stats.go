// Package bench is the measurement behind `space bench`: it drives a
// running spaced through the public client and reports medians and
// percentiles, never single shots.
package bench

import (
	"math"
	"slices"
	"time"
)

// Sample collects latencies.
type Sample []time.Duration

// Percentile returns the p-th percentile (0 < p <= 100) by nearest rank, in
// milliseconds.
func (s Sample) Percentile(p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return ms(sorted[rank-1])
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d.Microseconds())/10) / 100
}
