package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []sseEvent
		wantErr error
	}{
		{
			name:    "single event",
			in:      "id: 1\nevent: stdout\ndata: {\"text\":\"hi\"}\n\n",
			want:    []sseEvent{{ID: "1", HasID: true, Event: "stdout", Data: `{"text":"hi"}`}},
			wantErr: io.EOF,
		},
		{
			name:    "multi-line data joined by newline",
			in:      "data: a\ndata: b\ndata:\ndata:c\n\n",
			want:    []sseEvent{{Event: "message", Data: "a\nb\n\nc"}},
			wantErr: io.EOF,
		},
		{
			name:    "comments and heartbeats are skipped",
			in:      ": keepalive\n\n: keepalive\nid: 7\n: mid-event comment\nevent: end\ndata: {}\n\n",
			want:    []sseEvent{{ID: "7", HasID: true, Event: "end", Data: "{}"}},
			wantErr: io.EOF,
		},
		{
			name:    "id persists across events (HasID does not) and CRLF lines",
			in:      "id: 3\r\nevent: a\r\ndata: x\r\n\r\nevent: b\r\ndata: y\r\n\r\n",
			want:    []sseEvent{{ID: "3", HasID: true, Event: "a", Data: "x"}, {ID: "3", Event: "b", Data: "y"}},
			wantErr: io.EOF,
		},
		{
			name:    "id without data is kept, event type is reset",
			in:      "id: 9\nevent: lost\n\ndata: z\n\n",
			want:    []sseEvent{{ID: "9", Event: "message", Data: "z"}},
			wantErr: io.EOF,
		},
		{
			name:    "only one leading space is stripped; colons in value kept",
			in:      "data:  two spaces: yes\n\n",
			want:    []sseEvent{{Event: "message", Data: " two spaces: yes"}},
			wantErr: io.EOF,
		},
		{
			name:    "id with NUL is ignored, unknown fields too",
			in:      "id: 1\n\nid: 2\x003\nretry: 100\nfoo\ndata: d\n\n",
			want:    []sseEvent{{ID: "1", Event: "message", Data: "d"}},
			wantErr: io.EOF,
		},
		{
			name:    "event without its blank line is dropped at EOF",
			in:      "id: 1\nevent: stdout\ndata: x\n",
			wantErr: io.EOF,
		},
		{
			name:    "stream cut mid-line",
			in:      "id: 1\nevent: std",
			wantErr: io.ErrUnexpectedEOF,
		},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				s := newSSEReader(wrap(strings.NewReader(tt.in)))
				var got []sseEvent
				var err error
				for {
					var ev sseEvent
					if ev, err = s.next(); err != nil {
						break
					}
					got = append(got, ev)
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %d events %+v, want %+v", len(got), got, tt.want)
				}
				for i := range got {
					if got[i] != tt.want[i] {
						t.Errorf("event %d = %+v, want %+v", i, got[i], tt.want[i])
					}
				}
			})
		}
	}
}
