package checkpoint_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/seal"
)

// BenchmarkSaveLoad times what a pause and a resume of a sandbox holding
// 256 MiB pay on top of runsc: a Save of its image (encrypt and store
// every artifact, the manifest last) and a Load into a new directory
// (fetch, verify, decrypt), with the local-directory store spaced uses by
// default. The page file is random (checkpoints of real memory do not
// compress); -benchtime sets the cycles.
func BenchmarkSaveLoad(b *testing.B) {
	const size = 256 << 20
	dir := b.TempDir()
	pages := make([]byte, size)
	rand.Read(pages)
	for name, data := range map[string][]byte{"checkpoint.img": pages[:1<<20], "pages.img": pages, "pages_meta.img": pages[:64<<10]} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	s, err := blobstore.NewFS(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	keys, err := seal.OpenKeyring(filepath.Join(b.TempDir(), "platform.json"))
	if err != nil {
		b.Fatal(err)
	}
	repo := checkpoint.NewRepo(s, keys)
	ctx := context.Background()
	var saving, loading time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if err := repo.Save(ctx, manifest(id, ""), dir, nil); err != nil {
			b.Fatal(err)
		}
		saved := time.Now()
		out := b.TempDir()
		if _, _, err := repo.Load(ctx, id, out); err != nil {
			b.Fatal(err)
		}
		saving, loading = saving+saved.Sub(start), loading+time.Since(saved)
	}
	b.ReportMetric(float64(saving.Milliseconds())/float64(b.N), "ms/save")
	b.ReportMetric(float64(loading.Milliseconds())/float64(b.N), "ms/load")
	b.ReportMetric(size/(1<<20)/(saving.Seconds()/float64(b.N)), "MiB/s-save")
	b.ReportMetric(size/(1<<20)/(loading.Seconds()/float64(b.N)), "MiB/s-load")
}
