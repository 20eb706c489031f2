package template

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiskUse: a template's figures count each layer and start
// checkpoint its tagged builds need once (in the object store: as
// stored; on this node: the file data each image added and the start
// checkpoint's files), a layer of another template it shares in both, and
// what this node has not made as nothing.
func TestDiskUse(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, nil)
	s := e.s
	l1, l2, l3, l4 := key('1'), key('2'), key('3'), key('4')
	stored := map[string]int64{
		l1: e.storeLayer(t, l1, map[string]string{"a": strings.Repeat("a", 1000)}),
		l2: e.storeLayer(t, l2, map[string]string{"b": strings.Repeat("b", 2000)}),
		l3: e.storeLayer(t, l3, map[string]string{"c": strings.Repeat("c", 3000)}),
		l4: e.storeLayer(t, l4, map[string]string{"d": strings.Repeat("d", 4000)}),
	}
	// A start checkpoint of 500 bytes, stored and kept on this node.
	start := key('s')
	cp := t.TempDir()
	if err := os.WriteFile(filepath.Join(cp, "checkpoint.img"), []byte(strings.Repeat("s", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.art.saveStart(ctx, start, cp, "token"); err != nil {
		t.Fatal(err)
	}
	m, err := s.cfg.Repo.Get(ctx, startID(start))
	if err != nil {
		t.Fatal(err)
	}
	stored[start] = m.Bytes
	dir, _ := s.startDir(start, true)
	if err := s.keepStart(cp, dir, "token"); err != nil {
		t.Fatal(err)
	}

	// app: default = [l1 l2], v2 = [l1 l3] with the start; l1 is shared.
	// child (built from app:default) = [l1 l2 l4].
	e.readyBuild(t, "b1", "app", []string{l1, l2}, "", "default", "also")
	e.readyBuild(t, "b2", "app", []string{l1, l3}, start, "v2")
	e.readyBuild(t, "b3", "child", []string{l1, l2, l4}, "", "default")
	// This node made the images of l1 and l2 only.
	parent, root := "", ""
	for _, k := range []string{l1, l2} {
		id, err := s.im.derive(ctx, k, parent, root, func() (io.ReadCloser, error) { return s.art.openLayer(ctx, k) })
		if err != nil {
			t.Fatal(err)
		}
		parent, root = id, s.im.path(id)
	}
	agent := int64(len(testAgent))
	for _, tc := range []struct {
		name          string
		stored, local int64
	}{
		{"app", stored[l1] + stored[l2] + stored[l3] + stored[start], (1000 + agent) + (2000 + agent) + 500},
		{"child", stored[l1] + stored[l2] + stored[l4], (1000 + agent) + (2000 + agent)},
	} {
		info, err := s.Template(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Bytes != tc.stored || info.LocalBytes != tc.local {
			t.Errorf("%s: %d stored, %d local; want %d, %d", tc.name, info.Bytes, info.LocalBytes, tc.stored, tc.local)
		}
	}
	// The tenant of both (the default one) holds each layer once: l1 and
	// l2 are in both templates, and count once in its template_mb.
	want := stored[l1] + stored[l2] + stored[l3] + stored[l4] + stored[start]
	if got, err := s.TenantBytes(ctx, "default"); err != nil || got != want {
		t.Errorf("TenantBytes = %d, %v; want %d (each layer once)", got, err, want)
	}
	if got, err := s.TenantBytes(ctx, "other"); err != nil || got != 0 {
		t.Errorf("another tenant's TenantBytes = %d, %v; want 0", got, err)
	}
}
