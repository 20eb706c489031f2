package template

import (
	"path/filepath"
	"testing"
)

// TestLogCached: the line of a cached step carries cached, others do
// not, and a log read back from its file keeps it.
func TestLogCached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.log")
	l, err := openLog(path)
	if err != nil {
		t.Fatal(err)
	}
	l.cached(1, "[1/2] RUN true (cached)")
	l.add("info", 2, "[2/2] RUN make")
	l.finish()
	again, err := openLog(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, log := range []*buildLog{l, again} {
		got, _, _ := log.read(0, 0)
		if len(got) != 2 || !got[0].Cached || got[1].Cached || got[0].Step != 1 || got[0].Seq != 0 || got[1].Seq != 1 {
			t.Errorf("entries %+v", got)
		}
	}
}
