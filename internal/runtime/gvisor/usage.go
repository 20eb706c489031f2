package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.UsageReader = (*Runtime)(nil)

// Usage reads sandbox id's use of the host from its cgroups (v1 or v2, as
// CgroupDirs finds them) and the size of its writable layer: the file in
// the sandbox's directory that backs the overlay's upper tmpfs (runsc
// creates it unlinked and hands it to the sandbox process), whose
// allocated blocks are what the layer holds (gVisor punches the holes
// back when files are deleted).
func (r *Runtime) Usage(ctx context.Context, id string) (runtime.Usage, error) {
	if !idPattern.MatchString(id) {
		return runtime.Usage{}, errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	var u runtime.Usage
	var cpuOK, memOK bool
	for _, dir := range CgroupDirs(id) {
		if !cpuOK {
			u.CPU, cpuOK = readCPU(dir)
		}
		if !memOK {
			u.Memory, u.MemoryCache, memOK = readMemory(dir)
		}
	}
	if !cpuOK || !memOK {
		return runtime.Usage{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q has no cpu or memory cgroup", id)
	}
	disk, err := r.layerBytes(id)
	if err != nil {
		return runtime.Usage{}, err
	}
	u.Disk = disk
	entries, _ := os.ReadDir(r.sandboxDir(id))
	for _, e := range entries {
		u.Files += allocated(filepath.Join(r.sandboxDir(id), e.Name()))
	}
	return u, nil
}

// allocated is what path takes on its filesystem, a directory's entries
// counted one level down (the bundle).
func allocated(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0
	}
	n := uint64(st.Blocks) * 512
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			var sub syscall.Stat_t
			if syscall.Lstat(filepath.Join(path, e.Name()), &sub) == nil {
				n += uint64(sub.Blocks) * 512
			}
		}
	}
	return n
}

// readCPU reads the cumulative CPU time of a cgroup: cpuacct.usage (v1,
// nanoseconds) or cpu.stat's usage_usec (v2; the v1 cpu controller's
// cpu.stat has no such line).
func readCPU(dir string) (time.Duration, bool) {
	if n, err := readUint(filepath.Join(dir, "cpuacct.usage")); err == nil {
		return time.Duration(n), true
	}
	if st, err := readStat(filepath.Join(dir, "cpu.stat")); err == nil {
		if us, ok := st["usage_usec"]; ok {
			return time.Duration(us) * time.Microsecond, true
		}
	}
	return 0, false
}

// readMemory reads a memory cgroup: what it is charged minus the page cache
// of files (which the host can drop), and that cache. gVisor keeps the
// sandbox's memory in a memfd, which the kernel counts as shmem inside
// "cache": it is memory in use, not cache.
func readMemory(dir string) (used, cache uint64, ok bool) {
	if usage, err := readUint(filepath.Join(dir, "memory.usage_in_bytes")); err == nil { // v1
		st, err := readStat(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0, 0, false
		}
		cache = sub(st["total_cache"], st["total_shmem"])
		return sub(usage, cache), cache, true
	}
	if current, err := readUint(filepath.Join(dir, "memory.current")); err == nil { // v2
		st, err := readStat(filepath.Join(dir, "memory.stat"))
		if err != nil {
			return 0, 0, false
		}
		cache = sub(st["file"], st["shmem"])
		return sub(current, cache), cache, true
	}
	return 0, 0, false
}

// layerBytes is the allocated size of the file backing the sandbox's
// writable layer, found among its sandbox process's open files. Where it
// was found is remembered: the samplers ask for every sandbox every second
// or so, and the search (the runsc state file, every open file of the
// sandbox process) was a fifth of an idle spaced's CPU.
func (r *Runtime) layerBytes(id string) (uint64, error) {
	prefix := filepath.Join(r.sandboxDir(id), "runsc-filestore-")
	r.layerMu.Lock()
	fd, known := r.layerFDs[id]
	r.layerMu.Unlock()
	if known {
		if n, ok := layerFileBytes(fd, prefix); ok {
			return n, nil
		}
	}
	data, err := os.ReadFile(r.stateFile(id))
	if err != nil {
		if os.IsNotExist(err) {
			return 0, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
		}
		return 0, fmt.Errorf("read runsc state: %w", err)
	}
	var st runscState
	if err := json.Unmarshal(data, &st); err != nil || st.Sandbox.Pid <= 0 {
		return 0, fmt.Errorf("parse runsc state of %s", id)
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", st.Sandbox.Pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, fmt.Errorf("sandbox %s process: %w", id, err)
	}
	for _, e := range fds {
		p := filepath.Join(fdDir, e.Name())
		if n, ok := layerFileBytes(p, prefix); ok {
			r.layerMu.Lock()
			if r.layerFDs == nil {
				r.layerFDs = map[string]string{}
			}
			r.layerFDs[id] = p
			r.layerMu.Unlock()
			return n, nil
		}
	}
	return 0, errors.New("the file of sandbox " + id + "'s writable layer is not open in its sandbox process")
}

// layerFileBytes is the allocated size of the open file fd (a
// /proc/<pid>/fd/<n> link) if it is a file named prefix*. The name is what
// makes it the layer: a reused pid or fd number names another file.
func layerFileBytes(fd, prefix string) (uint64, bool) {
	target, err := os.Readlink(fd)
	if err != nil || !strings.HasPrefix(target, prefix) {
		return 0, false
	}
	var s syscall.Stat_t
	if err := syscall.Stat(fd, &s); err != nil {
		return 0, false
	}
	return uint64(s.Blocks) * 512, true
}

// forgetLayer drops what layerBytes remembered of sandbox id.
func (r *Runtime) forgetLayer(id string) {
	r.layerMu.Lock()
	delete(r.layerFDs, id)
	r.layerMu.Unlock()
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
}

// readStat reads a "key value" per line cgroup file.
func readStat(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}
