package agent

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONError writes envd's plain HTTP error body.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func (s *Server) envs(w http.ResponseWriter, r *http.Request) {
	env := s.state.get().EnvVars
	if env == nil {
		env = map[string]string{}
	}
	writeJSON(w, http.StatusOK, env)
}

// Metrics is the body of GET /metrics, envd's shape.
type Metrics struct {
	TS          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// cpuSampler turns /proc/stat counters into a usage percentage since the
// previous call (since boot on the first).
type cpuSampler struct {
	mu          sync.Mutex
	busy, total uint64
}

var cpu cpuSampler

func (c *cpuSampler) usedPct() float64 {
	busy, total, err := readCPU()
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	db, dt := busy-c.busy, total-c.total
	c.busy, c.total = busy, total
	if dt == 0 {
		return 0
	}
	pct := float64(db) / float64(dt) * 100
	return float64(int(pct*100)) / 100
}

func readCPU() (busy, total uint64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		for i, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			total += n
			if i != 3 && i != 4 { // idle and iowait
				busy += n
			}
		}
		return busy, total, nil
	}
	return 0, 0, sc.Err()
}

func readMeminfo() map[string]uint64 {
	out := map[string]uint64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(fields[0], 10, 64)
		out[k] = n * 1024 // kB
	}
	return out
}

func collectMetrics() Metrics {
	m := Metrics{TS: time.Now().Unix(), CPUCount: runtime.NumCPU(), CPUUsedPct: cpu.usedPct()}
	mem := readMeminfo()
	m.MemTotal = mem["MemTotal"]
	avail, ok := mem["MemAvailable"]
	if !ok {
		avail = mem["MemFree"] + mem["Buffers"] + mem["Cached"]
	}
	if m.MemTotal > avail {
		m.MemUsed = m.MemTotal - avail
	}
	m.MemCache = mem["Cached"]
	m.MemTotalMiB = m.MemTotal >> 20
	m.MemUsedMiB = m.MemUsed >> 20
	var st unix.Statfs_t
	if unix.Statfs("/", &st) == nil {
		bs := uint64(st.Bsize)
		m.DiskTotal = st.Blocks * bs
		m.DiskUsed = (st.Blocks - st.Bfree) * bs
	}
	return m
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, collectMetrics())
}
