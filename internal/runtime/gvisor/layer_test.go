package gvisor

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// upperTar builds a tar shaped like runsc's tar rootfs-upper.
func upperTar(t *testing.T, entries []tar.Header, bodies map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		h.ModTime = time.Unix(1700000000, 0)
		body := bodies[h.Name]
		h.Size = int64(len(body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return &buf
}

type entry struct {
	typ  byte
	link string
	pax  map[string]string
	body string
}

func readLayer(t *testing.T, r io.Reader) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = entry{typ: h.Typeflag, link: h.Linkname, pax: h.PAXRecords, body: string(b)}
	}
}

func TestOCILayer(t *testing.T) {
	opaque := map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y", "SCHILY.xattr.user.keep": "1"}
	in := upperTar(t, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./etc/resolv.conf", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./etc/resolv.conf.space", Typeflag: tar.TypeChar},
		{Name: "./usr/bin/yes", Typeflag: tar.TypeLink, Linkname: "./etc/resolv.conf.space"},
		{Name: "./usr/bin/gone", Typeflag: tar.TypeChar},
		{Name: "./var/log/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: opaque},
		{Name: "./var/log/z", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./hardnew", Typeflag: tar.TypeReg, Mode: 0o4755},
		{Name: "./newfile", Typeflag: tar.TypeLink, Linkname: "./hardnew"},
		{Name: "./plink", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
	}, map[string]string{"./etc/hostname": "box\n", "./etc/resolv.conf": "nameserver 10.0.0.1\n", "./var/log/z": "z", "./hardnew": "new"})
	var out bytes.Buffer
	if err := ociLayer(in, &out); err != nil {
		t.Fatal(err)
	}
	got := readLayer(t, &out)
	want := map[string]entry{
		"etc/":                 {typ: tar.TypeDir},
		"etc/hostname":         {typ: tar.TypeReg, body: "box\n"},
		"usr/bin/.wh.yes":      {typ: tar.TypeReg},
		"usr/bin/.wh.gone":     {typ: tar.TypeReg},
		"var/log/":             {typ: tar.TypeDir, pax: map[string]string{"SCHILY.xattr.user.keep": "1"}},
		"var/log/.wh..wh..opq": {typ: tar.TypeReg},
		"var/log/z":            {typ: tar.TypeReg, body: "z"},
		"hardnew":              {typ: tar.TypeReg, body: "new"},
		"newfile":              {typ: tar.TypeLink, link: "hardnew"},
		"plink":                {typ: tar.TypeSymlink, link: "/etc/passwd"},
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s missing from the layer", name)
			continue
		}
		if g.typ != w.typ || g.link != w.link || g.body != w.body || len(g.pax) != len(w.pax) {
			t.Errorf("%s = %+v, want %+v", name, g, w)
		}
		for k, v := range w.pax {
			if g.pax[k] != v {
				t.Errorf("%s: pax %s = %q, want %q", name, k, g.pax[k], v)
			}
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected entry %s in the layer", name)
		}
	}
}

func TestOCILayerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"dot-dot", []tar.Header{{Name: "./a/../../etc/passwd", Typeflag: tar.TypeReg}}, "leaves the root"},
		{"link to dropped", []tar.Header{
			{Name: "./etc/resolv.conf", Typeflag: tar.TypeReg},
			{Name: "./tmp/r", Typeflag: tar.TypeLink, Linkname: "./etc/resolv.conf"},
		}, "hard link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ociLayer(upperTar(t, tc.entries, nil), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
