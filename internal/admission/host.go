package admission

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ReadHost reads the machine: /proc/meminfo, and the filesystem of
// diskPath (the data dir) by statfs.
func ReadHost(diskPath string) (Host, error) {
	var h Host
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return h, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			h.MemTotal = n << 10
		case "MemAvailable:":
			h.MemAvailable = n << 10
		}
	}
	if h.MemTotal == 0 {
		return h, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	h.DiskFree, h.DiskTotal, err = ReadDisk(diskPath)
	return h, err
}

// ReadDisk reads the free and total bytes of path's filesystem (statfs).
func ReadDisk(path string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	// Bavail: what an unprivileged writer may still use (spaced is root,
	// but the reserved blocks are the host's last resort, not ours).
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// DiskFloor is what must stay free of a filesystem of total bytes.
func DiskFloor(total int64) int64 {
	return min(int64(floorShare*float64(total)), maxDiskFloor)
}

// Settings are the operator's budgets; 0 means derived from the host.
type Settings struct {
	MemoryMB, DiskMB int64
	Sandboxes        int
}

// Defaults derived from the host.
const (
	// DefaultMemoryShare and DefaultDiskShare of the machine's memory and
	// of the data dir's filesystem are the budgets nobody set.
	DefaultMemoryShare = 0.8
	DefaultDiskShare   = 0.8
	// Floors: what the host keeps free is 5% of it, at most 1 GiB of
	// memory and 2 GiB of disk.
	floorShare     = 0.05
	maxMemoryFloor = 1 << 30
	maxDiskFloor   = 2 << 30
	// threadsPerSandbox: a gVisor sandbox runs about 20 host threads
	// (sentry, gofer, systrap stubs), and every one is a pid.
	threadsPerSandbox = 32
)

// Resolve turns settings into budgets for host: the settings where set,
// else the defaults. slots is how many sandboxes the address range holds;
// pidMax the kernel's pid_max (0: unknown).
func Resolve(s Settings, h Host, slots, pidMax int) Budget {
	b := Budget{
		MemoryBytes: s.MemoryMB << 20,
		DiskBytes:   s.DiskMB << 20,
		Sandboxes:   s.Sandboxes,
		MemoryFloor: min(int64(floorShare*float64(h.MemTotal)), maxMemoryFloor),
		DiskFloor:   DiskFloor(h.DiskTotal),
	}
	if b.MemoryBytes == 0 {
		b.MemoryBytes = int64(DefaultMemoryShare * float64(h.MemTotal))
	}
	if b.DiskBytes == 0 {
		b.DiskBytes = int64(DefaultDiskShare * float64(h.DiskTotal))
	}
	if b.Sandboxes == 0 {
		b.Sandboxes = slots
		if pidMax > 0 {
			b.Sandboxes = min(b.Sandboxes, pidMax/threadsPerSandbox)
		}
	}
	return b
}

// PidMax reads the kernel's pid_max, or 0.
func PidMax() int {
	data, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}
