package bench

import "testing"

func TestWindowFigures(t *testing.T) {
	samples := []daemonSample{
		{done: 10, rss: 10 << 20, fds: 30, goroutines: 40},
		{done: 20, rss: 30 << 20, fds: 50, goroutines: 60},
		{done: 30, rss: 20 << 20, fds: 40, goroutines: 50},
		{done: 90, rss: 99 << 20, fds: 99, goroutines: 99},
	}
	tests := []struct {
		name string
		in   func(daemonSample) bool
		want DaemonFigures
	}{
		{"odd count takes the middle", func(s daemonSample) bool { return s.done <= 30 }, DaemonFigures{Samples: 3, RSSMiB: 20, OpenFDs: 40, Goroutines: 50}},
		{"even count averages the middle two", func(s daemonSample) bool { return s.done <= 20 }, DaemonFigures{Samples: 2, RSSMiB: 20, OpenFDs: 40, Goroutines: 50}},
		{"empty window is zero", func(s daemonSample) bool { return false }, DaemonFigures{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := windowFigures(samples, tt.in); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
