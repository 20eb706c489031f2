package template

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
)

// A COPY takes files from an uploaded file set (a tar, gzip or not, paths
// relative to the build context) and writes them into the step's sandbox
// with Docker's rules: a directory source copies its contents into the
// destination; a file goes to the destination path itself, or into it when
// the destination ends in "/", when there are several sources, or when it
// is an existing directory in the image (decided inside the sandbox).
// planCopy reads the file set once to pick the entries, writes what each
// destination receives as a tar of its own, and hashes exactly that: the
// step's cache key depends on the files it copies and on nothing else of
// the upload.

// extraction is one tar to write into the sandbox.
type extraction struct {
	dest   string // absolute, in the sandbox
	single bool   // one file at dest (or into it if it is a directory)
	tar    string // local file
}

type copyPlan struct {
	parts  []extraction
	digest string
	// release removes the parts and gives back what they were charged.
	release func()
}

// planCopy plans c against the file set at filesTar; workdir resolves a
// relative destination; the part tars are written into dir, within
// bounds. The caller releases the plan it gets.
func planCopy(filesTar string, c *recipe.Copy, workdir, dir string, bounds copyBounds) (_ *copyPlan, err error) {
	index, err := indexFiles(filesTar, bounds.max)
	if err != nil {
		return nil, err
	}
	dest := recipe.ResolvePath(workdir, c.Dest)
	intoDir := strings.HasSuffix(c.Dest, "/") || strings.HasSuffix(c.Dest, "/.")
	// roots: each matched source, and whether it is a directory.
	type root struct {
		name string
		dir  bool
	}
	var roots []root
	for _, src := range c.Src {
		clean, err := recipe.CleanSource(src)
		if err != nil {
			return nil, err
		}
		matched := 0
		for _, name := range index.names {
			ok := name == clean || clean == "" && name == "."
			if !ok && strings.ContainsAny(clean, "*?[") {
				ok, _ = path.Match(clean, name)
			}
			if ok {
				roots = append(roots, root{name: name, dir: index.dirs[name]})
				matched++
			}
		}
		if clean == "" {
			roots, matched = append(roots, root{name: ".", dir: true}), matched+1
		}
		if matched == 0 {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "COPY source %q is not in the uploaded files", src)
		}
	}
	if len(roots) > 1 {
		intoDir = true
	}
	plan := &copyPlan{}
	plan.release = func() {
		for _, p := range plan.parts {
			if p.tar != "" {
				os.Remove(p.tar)
			}
		}
		bounds.charge.release()
	}
	defer func() {
		if err != nil {
			plan.release()
		}
	}()
	// part of each entry name: a directory root takes everything under it;
	// a file root takes itself.
	type target struct {
		part int
		name string // in the part's tar
	}
	targets := map[string]target{}
	for _, r := range roots {
		p := len(plan.parts)
		switch {
		case r.dir:
			plan.parts = append(plan.parts, extraction{dest: dest})
			for _, name := range index.names {
				rel, ok := under(r.name, name)
				if ok && rel != "" {
					targets[name] = target{p, rel}
				}
			}
		case intoDir:
			plan.parts = append(plan.parts, extraction{dest: dest})
			targets[r.name] = target{p, path.Base(r.name)}
		default:
			plan.parts = append(plan.parts, extraction{dest: dest, single: true})
			targets[r.name] = target{p, path.Base(r.name)}
		}
	}
	// Write the parts and hash what they hold.
	writers := make([]*tar.Writer, len(plan.parts))
	files := make([]*os.File, len(plan.parts))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i := range plan.parts {
		f, err := os.CreateTemp(dir, "copy-*.tar")
		if err != nil {
			return nil, err
		}
		files[i], writers[i] = f, tar.NewWriter(chargedWriter{bounds.charge, bounds.guard(f)})
		plan.parts[i].tar = f.Name()
	}
	h := sha256.New()
	err = readFiles(filesTar, bounds.max, func(hdr *tar.Header, r io.Reader) error {
		t, ok := targets[cleanEntry(hdr.Name)]
		if !ok {
			return nil
		}
		out := *hdr
		out.Name = t.name
		out.Uid, out.Gid, out.Uname, out.Gname = 0, 0, "", ""
		out.PAXRecords = nil
		out.Format = tar.FormatPAX
		if hdr.Typeflag == tar.TypeLink {
			lt, ok := targets[cleanEntry(hdr.Linkname)]
			if !ok || lt.part != t.part {
				return errdefs.New(errdefs.ErrInvalidArgument, "COPY: %s is a hard link to %s, which this COPY does not copy with it", hdr.Name, hdr.Linkname)
			}
			out.Linkname = lt.name
		}
		if hdr.Typeflag == tar.TypeDir {
			out.Name += "/"
		}
		fmt.Fprintf(h, "%d\x00%s\x00%c\x00%o\x00%s\x00%d\x00", t.part, out.Name, out.Typeflag, out.Mode, out.Linkname, out.Size)
		if err := writers[t.part].WriteHeader(&out); err != nil {
			return err
		}
		_, err := io.Copy(io.MultiWriter(writers[t.part], h), r)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, w := range writers {
		if err := w.Close(); err != nil {
			return nil, err
		}
		if err := files[i].Close(); err != nil {
			return nil, err
		}
		files[i] = nil
	}
	plan.digest = hex.EncodeToString(h.Sum(nil))
	return plan, nil
}

// under reports whether name is root or below it, and its path below.
func under(root, name string) (string, bool) {
	if root == "." {
		if name == "." {
			return "", true
		}
		return name, true
	}
	if name == root {
		return "", true
	}
	rel, ok := strings.CutPrefix(name, root+"/")
	return rel, ok
}

// fileIndex is the names in a file set, with the directories among them
// (also those only implied by a deeper name).
type fileIndex struct {
	names []string
	dirs  map[string]bool
}

func indexFiles(filesTar string, max int64) (*fileIndex, error) {
	idx := &fileIndex{dirs: map[string]bool{}}
	seen := map[string]bool{}
	add := func(name string, dir bool) {
		if dir {
			idx.dirs[name] = true
		}
		if !seen[name] {
			seen[name] = true
			idx.names = append(idx.names, name)
		}
	}
	err := readFiles(filesTar, max, func(hdr *tar.Header, _ io.Reader) error {
		name := cleanEntry(hdr.Name)
		if name == "." {
			return nil
		}
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			add(d, true)
		}
		add(name, hdr.Typeflag == tar.TypeDir)
		return nil
	})
	return idx, err
}

func cleanEntry(name string) string {
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	if c == "" {
		return "."
	}
	return c
}

// readFiles calls fn for each entry of a file set, gzip or not; names that
// leave the set's root are refused. The set may expand to at most limit
// bytes, counted as it is read: its tar stream after decompression, and
// its entries' sizes (a sparse entry's holes are not in the stream).
func readFiles(filesTar string, limit int64, fn func(*tar.Header, io.Reader) error) error {
	f, err := os.Open(filesTar)
	if err != nil {
		return fmt.Errorf("file set: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the uploaded files are not a valid gzip tar: %v", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(&expandLimit{r: r, left: limit, max: limit})
	var sizes int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errdefs.Class(err) != nil {
			return err
		}
		if err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the uploaded files are not a valid tar: %v", err)
		}
		for _, part := range strings.Split(filepath.ToSlash(hdr.Name), "/") {
			if part == ".." {
				return errdefs.New(errdefs.ErrInvalidArgument, "the uploaded files hold %q, which leaves the build context", hdr.Name)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			continue // devices, fifos: not copied
		}
		if sizes += max(hdr.Size, 0); sizes > limit {
			return tooExpanded(limit)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}
