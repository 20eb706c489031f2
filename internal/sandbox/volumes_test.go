package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func TestCheckImagePaths(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "home/user"), 0o755)
	os.Symlink("/usr/bin", filepath.Join(root, "home/user/tools"))
	os.WriteFile(filepath.Join(root, "home/user/.bashrc"), nil, 0o644)
	for path, bad := range map[string]string{
		"/home/user/work":        "",
		"/mnt/new/dir":           "",
		"/home/user/tools":       "/home/user/tools is a symlink",
		"/home/user/tools/x":     "/home/user/tools is a symlink",
		"/home/user/.bashrc/sub": "/home/user/.bashrc is a file",
	} {
		err := checkImagePaths(root, []VolumeMount{{Name: "v", Path: path}})
		switch {
		case bad == "" && err != nil:
			t.Errorf("%s: %v", path, err)
		case bad != "" && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(errdefs.PublicMessage(err), bad)):
			t.Errorf("%s: %v, want a 400 saying %q", path, err, bad)
		case err != nil && strings.Contains(errdefs.PublicMessage(err), root):
			t.Errorf("%s: the error names a host path: %v", path, err)
		}
	}
}

func TestVolumesInManifests(t *testing.T) {
	raw, err := volumesMeta([]store.VolumeMount{{VolumeID: "vol-x", Name: "data", Path: "/data", ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "vol-x") {
		t.Fatalf("a manifest names this node's volume id: %s", raw)
	}
	got, err := manifestVolumes(&checkpoint.Manifest{Meta: map[string]string{metaVolumes: raw}})
	if err != nil || len(got) != 1 || got[0].Name != "data" || got[0].Path != "/data" || !got[0].ReadOnly {
		t.Fatalf("%+v %v", got, err)
	}
	if name, rw := readWrite(got); rw {
		t.Fatalf("read-only mounts reported read-write (%s)", name)
	}
}
