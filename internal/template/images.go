package template

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/rootfs"
	"golang.org/x/sys/unix"
)

// images is this node's cache of template images, one directory per cache
// key under <templates>/_images: what a step's layer made of its parent's
// image, with the agent added. An image is made in a temporary directory
// and renamed into place when complete, so a crash never leaves a half-made
// image under a final name; once there it never changes (sandboxes and
// checkpoints run on it). Each has a small record next to it (<id>.json).
//
// Images are made under a work directory of this process (<dir>/.tmp-*),
// held with flock(2) while the process lives: another daemon sharing the
// templates directory (tests run several at once) cleans up only the work
// directories of processes that are gone, never one mid-make.
type images struct {
	dir   string
	agent agentFile
	max   int64 // bytes of files one layer may write
	log   *slog.Logger
	work  string   // this process's work directory
	held  *os.File // work, flock-held while the process lives

	locks keylock.Map
}

// agentFile is the agent binary every image gets, and its digest (part of
// an image's id: a new agent makes new images from the same layers).
type agentFile struct {
	path   string
	digest string
	size   int64
}

// loadAgent copies the agent binary at path into dir under its digest:
// path may change under us (the base template's current image is
// replaced when the agent is rebuilt), and every image must get exactly
// the agent its id names.
func loadAgent(path, dir string) (agentFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return agentFile{}, fmt.Errorf("agent binary: %w", err)
	}
	sum := sha256.Sum256(data)
	a := agentFile{digest: hex.EncodeToString(sum[:]), size: int64(len(data))}
	a.path = filepath.Join(dir, "space-agent-"+a.digest[:16])
	if _, err := os.Stat(a.path); err == nil {
		return a, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return agentFile{}, fmt.Errorf("agent binary: %w", err)
	}
	tmp := a.path + ".tmp-" + randHex(4)
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return agentFile{}, fmt.Errorf("agent binary: %w", err)
	}
	if err := os.Rename(tmp, a.path); err != nil {
		os.Remove(tmp)
		return agentFile{}, fmt.Errorf("agent binary: %w", err)
	}
	return a, nil
}

// imageRecord is what the cache keeps beside an image.
type imageRecord struct {
	ID      string    `json:"id"`
	Key     string    `json:"key"`
	Parent  string    `json:"parent,omitempty"`
	Agent   string    `json:"agent"`
	Created time.Time `json:"created"`
	// Bytes is the uncompressed size of the layer that made it.
	Bytes int64 `json:"bytes"`
	// Disk is the file data the image added on this node: its layer's,
	// its agent's and its /tmp marker's (everything else is hard links to
	// its parent's files).
	Disk int64 `json:"disk,omitempty"`
}

// disk is the file data the image holds beyond its parent's (records
// written before Disk have only the layer's).
func (r *imageRecord) disk() int64 {
	if r.Disk > 0 {
		return r.Disk
	}
	return r.Bytes
}

const imagePrefix = "i-"

func newImages(dir string, agent agentFile, max int64, log *slog.Logger) (*images, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("images dir: %w", err)
	}
	// What a crashed process left half-made is of no use.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("images dir: %w", err)
	}
	for _, e := range entries {
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix):
			if err := removeAbandoned(filepath.Join(dir, e.Name())); err != nil {
				return nil, err
			}
		case strings.HasPrefix(e.Name(), stagingPrefix):
			// Left by a crash between mkdir and rename (an empty dir);
			// one younger than a minute may be a live process's.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	work, held, err := lockedWorkDir(dir)
	if err != nil {
		return nil, err
	}
	return &images{dir: dir, agent: agent, max: max, log: log, work: work, held: held}, nil
}

const (
	tmpPrefix     = ".tmp-"
	stagingPrefix = ".new-" // a work directory not yet locked: empty, for microseconds
)

// lockedWorkDir makes a new work directory in dir and holds it with an
// exclusive flock until the process ends or close. It is made under
// another name and renamed once locked, so no other process ever sees it
// unlocked.
func lockedWorkDir(dir string) (string, *os.File, error) {
	name := randHex(8)
	staging := filepath.Join(dir, stagingPrefix+name)
	work := filepath.Join(dir, tmpPrefix+name)
	if err := os.Mkdir(staging, 0o700); err != nil {
		return "", nil, fmt.Errorf("images work dir: %w", err)
	}
	f, err := os.Open(staging)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(staging, work)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.Remove(staging)
		return "", nil, fmt.Errorf("images work dir: %w", err)
	}
	return work, f, nil
}

// removeAbandoned removes the work directory at path unless a live
// process holds it. A directory that is not a work directory (an earlier
// version's half-made image) is removed as it is.
func removeAbandoned(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // its owner ended and removed it just now
		}
		return fmt.Errorf("images dir: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil // a live process's
		}
		return fmt.Errorf("images dir: lock %s: %w", path, err)
	}
	return rootfs.Remove(path)
}

// close removes this process's work directory and releases it.
func (im *images) close() {
	rootfs.Remove(im.work)
	im.held.Close()
}

// id is the image of cache key with this node's agent.
func (im *images) id(key string) string {
	sum := sha256.Sum256([]byte(key + "\x00" + im.agent.digest))
	return imagePrefix + hex.EncodeToString(sum[:16])
}

func (im *images) path(id string) string { return filepath.Join(im.dir, id) }

// has reports whether image id is here, whole: its directory (renamed
// into place only when complete) with the agent in it, looked up inside
// the image (an image's /usr/local/bin may be a link; followed on the
// host it would tell a tenant which host paths exist).
func (im *images) has(id string) bool {
	_, err := rootfs.Stat(im.path(id), "usr/local/bin/space-agent")
	return err == nil
}

func (im *images) record(id string) (*imageRecord, error) {
	data, err := os.ReadFile(filepath.Join(im.dir, id+".json"))
	if err != nil {
		return nil, err
	}
	rec := new(imageRecord)
	return rec, json.Unmarshal(data, rec)
}

// derive makes the image of key: the parent image (a directory; "" for an
// empty one) with the layer applied and the agent added. layer is opened
// only if the image is not already here.
func (im *images) derive(ctx context.Context, key, parentID, parentRoot string, layer func() (io.ReadCloser, error)) (string, error) {
	id := im.id(key)
	unlock := im.locks.Lock(id)
	defer unlock()
	if im.has(id) {
		return id, nil
	}
	start := time.Now()
	tmp := filepath.Join(im.work, id+"-"+randHex(4))
	ok := false
	defer func() {
		if !ok {
			rootfs.Remove(tmp)
		}
	}()
	if parentRoot != "" {
		if err := rootfs.Clone(parentRoot, tmp); err != nil {
			return "", fmt.Errorf("image %s: %w", id, err)
		}
	} else if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", fmt.Errorf("image %s: %w", id, err)
	}
	rc, err := layer()
	if err != nil {
		return "", err
	}
	n, err := rootfs.Apply(ctx, tmp, rc, rootfs.ApplyOptions{Private: parentRoot == "", MaxBytes: im.max, Logger: im.log})
	rc.Close()
	if errdefs.Class(err) == errdefs.ErrTooLarge {
		return "", errdefs.Wrap(errdefs.ErrTooLarge, err, "%s (SPACE_TEMPLATE_MAX_IMAGE)", errdefs.PublicMessage(err))
	}
	if err != nil {
		return "", err
	}
	if err := im.addAgent(ctx, tmp); err != nil {
		return "", err
	}
	marker, err := keepTmp(ctx, tmp)
	if err != nil {
		return "", err
	}
	rec, _ := json.Marshal(imageRecord{ID: id, Key: key, Parent: parentID, Agent: im.agent.digest, Created: time.Now().UTC(), Bytes: n, Disk: n + im.agent.size + marker})
	if err := os.WriteFile(filepath.Join(im.dir, id+".json"), rec, 0o600); err != nil {
		return "", fmt.Errorf("image %s: %w", id, err)
	}
	if err := os.Rename(tmp, im.path(id)); err != nil {
		// Another process sharing the directory made the same image
		// meanwhile: its id names its content, so that one is as good.
		if !errors.Is(err, fs.ErrExist) || !im.has(id) { // EEXIST or ENOTEMPTY
			return "", fmt.Errorf("image %s: %w", id, err)
		}
		im.log.Debug("image made meanwhile by another process", "image", id)
		return id, nil
	}
	ok = true
	im.log.Debug("image made", "image", id, "parent", parentID, "layer_bytes", n, "ms", time.Since(start).Milliseconds())
	return id, nil
}

// addAgent puts this node's agent into the image at root, replacing (never
// writing through) whatever is there.
func (im *images) addAgent(ctx context.Context, root string) error {
	f, err := os.Open(im.agent.path)
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	if err := rootfs.AddFile(ctx, root, "/usr/local/bin/space-agent", 0o755, 0, 0, f, st.Size()); err != nil {
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the image has no room for the agent at /usr/local/bin/space-agent: %s", errdefs.PublicMessage(err))
	}
	return nil
}

// tmpKeep is what keeps an image's /tmp from being empty: gVisor mounts
// a tmpfs over an empty /tmp, and what a build step leaves there would not
// be in its layer (a container build keeps it), nor /tmp in a sandbox's
// disk limit and snapshots.
const tmpKeep = "Keeps /tmp on the sandbox's disk: gVisor mounts a tmpfs over an empty /tmp.\n"

// keepTmp puts the marker into an empty /tmp of the image at root and
// returns the bytes it added.
func keepTmp(ctx context.Context, root string) (int64, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return 0, fmt.Errorf("image %s: %w", root, err)
	}
	defer r.Close()
	if st, err := r.Lstat("tmp"); err != nil || !st.IsDir() {
		return 0, nil // no /tmp, or a link (never followed on the host)
	}
	dir, err := r.Open("tmp")
	if err != nil {
		return 0, nil
	}
	entries, err := dir.ReadDir(1)
	dir.Close()
	if err != nil && !errors.Is(err, io.EOF) || len(entries) > 0 {
		return 0, nil // io.EOF: empty
	}
	return int64(len(tmpKeep)), rootfs.AddFile(ctx, root, "/tmp/.space-keep", 0o644, 0, 0, strings.NewReader(tmpKeep), int64(len(tmpKeep)))
}

// detach takes an image out of the cache (its record first, then its
// directory into this process's work directory, both renames) and
// returns what is left to delete: the caller deletes it without holding
// anything (an image is a large tree).
func (im *images) detach(id string) (string, error) {
	if !strings.HasPrefix(id, imagePrefix) {
		return "", fmt.Errorf("not a cached image: %q", id)
	}
	unlock := im.locks.Lock(id)
	defer unlock()
	if err := os.Remove(filepath.Join(im.dir, id+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	trash := filepath.Join(im.work, "gone-"+id+"-"+randHex(4))
	if err := os.Rename(im.path(id), trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("remove image %s: %w", id, err)
	}
	return trash, nil
}

// list names the cached images with their records.
func (im *images) list() []*imageRecord {
	entries, _ := os.ReadDir(im.dir)
	var out []*imageRecord
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), imagePrefix) {
			continue
		}
		rec, err := im.record(e.Name())
		if err != nil {
			rec = &imageRecord{ID: e.Name()}
		}
		if info, err := e.Info(); err == nil && rec.Created.IsZero() {
			rec.Created = info.ModTime()
		}
		out = append(out, rec)
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
