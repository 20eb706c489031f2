package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.UsageReporter = (*Runtime)(nil)

// Usage reads what sandbox id takes of the host: the working set of the
// memory cgroup runsc made for it (the sentry, the gofer and the
// application memory they hold, which gVisor keeps in a memfd charged to
// that cgroup), and the allocated blocks of its writable layer, an
// unlinked file runsc keeps open in the sandbox's directory, plus the
// directory's own files (bundle, logs).
func (r *Runtime) Usage(_ context.Context, id string) (runtime.Usage, error) {
	if !idPattern.MatchString(id) {
		return runtime.Usage{}, nil
	}
	u := runtime.Usage{MemoryBytes: cgroupWorkingSet(id)}
	dir := r.sandboxDir(id)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		u.DiskBytes += allocated(filepath.Join(dir, e.Name()))
	}
	if pid := r.sandboxPid(id); pid > 0 {
		u.DiskBytes += filestoreBytes(pid, dir)
	}
	return u, nil
}

// cgroupWorkingSet is usage minus inactive file pages, as the kubelet
// counts a container's working set: the layer's file pages the sandbox
// has not used lately are reclaimable, and they are on the disk already.
func cgroupWorkingSet(id string) int64 {
	// cgroup v1
	dir := filepath.Join("/sys/fs/cgroup/memory", cgroupParent, id)
	usage, err := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
	inactiveKey := "total_inactive_file"
	if err != nil {
		// cgroup v2
		dir = filepath.Join("/sys/fs/cgroup", cgroupParent, id)
		if usage, err = readInt(filepath.Join(dir, "memory.current")); err != nil {
			return 0
		}
		inactiveKey = "inactive_file"
	}
	inactive := statValue(filepath.Join(dir, "memory.stat"), inactiveKey)
	if inactive > usage {
		return 0
	}
	return usage - inactive
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func statValue(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// allocated is what path takes on its filesystem, directories walked one
// level (the bundle).
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0
	}
	n := st.Blocks * 512
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			var sub syscall.Stat_t
			if syscall.Lstat(filepath.Join(path, e.Name()), &sub) == nil {
				n += sub.Blocks * 512
			}
		}
	}
	return n
}

// sandboxPid is the sandbox process runsc's state file names, or 0.
func (r *Runtime) sandboxPid(id string) int {
	data, err := os.ReadFile(r.stateFile(id))
	if err != nil {
		return 0
	}
	var st runscState
	if json.Unmarshal(data, &st) != nil {
		return 0
	}
	return st.Sandbox.Pid
}

// filestoreBytes is the allocated size of the unlinked files under dir
// that process pid holds open: the overlay's filestore (its name starts
// with runsc-filestore).
func filestoreBytes(pid int, dir string) int64 {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return 0
	}
	prefix := []byte(dir + "/")
	var n int64
	buf := make([]byte, 512)
	for _, e := range entries {
		p := fdDir + "/" + e.Name()
		k, err := syscall.Readlink(p, buf)
		if err != nil || !bytes.HasPrefix(buf[:k], prefix) || !bytes.HasSuffix(buf[:k], []byte(" (deleted)")) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}
