package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestVolumeNamesAreUnique(t *testing.T) {
	b, path := openTest(t)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Go(func() {
			err := b.CreateVolume(ctx, &Volume{ID: fmt.Sprintf("v%02d", i), Name: "data", State: VolumeReady})
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.Is(err, errdefs.ErrAlreadyExists):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d creates of one name succeeded, want 1", won)
	}
	v, err := b.VolumeByName(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	v.SizeMB = 64
	if err := b.UpdateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b2, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	got, err := b2.GetVolume(ctx, v.ID)
	if err != nil || got.SizeMB != 64 || got.Name != "data" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	if err := b2.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.VolumeByName(ctx, "data"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("name still taken after delete: %v", err)
	}
	if err := b2.CreateVolume(ctx, &Volume{ID: "new", Name: "data"}); err != nil {
		t.Fatalf("name not free after delete: %v", err)
	}
	if err := b2.UpdateVolume(ctx, &Volume{ID: "gone", Name: "x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing volume: %v", err)
	}
	all, err := b2.ListVolumes(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("list: %d, %v", len(all), err)
	}
}
