package bench

import "testing"

func TestCheckLines(t *testing.T) {
	tests := []struct {
		name                            string
		out                             string
		truth                           int
		lines, lost, repeated, disorder int
		ended                           bool
	}{
		{"whole", "1\n2\n3\nend 3\n", -1, 3, 0, 0, 0, true},
		{"empty run", "end 0\n", -1, 0, 0, 0, 0, true},
		{"lost in the middle", "1\n3\nend 3\n", -1, 2, 1, 0, 0, true},
		{"lost at the end", "1\n2\n", -1, 2, 0, 0, 0, false},
		{"end names more than came", "1\n2\nend 4\n", -1, 2, 2, 0, 0, true},
		{"repeated", "1\n2\n2\n3\nend 3\n", -1, 3, 0, 1, 0, true},
		{"out of order", "2\n1\n3\nend 3\n", -1, 3, 0, 0, 1, true},
		{"cut short, read back", "1\n2\n", 5, 2, 3, 0, 0, false},
		{"joined in one event", "1\n2\n3\nend 3", -1, 3, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, lost, repeated, disorder, ended := checkLines([]byte(tt.out), tt.truth)
			if lines != tt.lines || lost != tt.lost || repeated != tt.repeated || disorder != tt.disorder || ended != tt.ended {
				t.Errorf("checkLines(%q) = %d lines, %d lost, %d repeated, %d out of order, ended %v; want %d, %d, %d, %d, %v",
					tt.out, lines, lost, repeated, disorder, ended, tt.lines, tt.lost, tt.repeated, tt.disorder, tt.ended)
			}
		})
	}
}
