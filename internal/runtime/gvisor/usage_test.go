package gvisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The cgroup files as the kernel writes them (trimmed), v1 and v2: memory
// in use is what is charged minus the files' page cache; gVisor's memfd
// (shmem) is counted as used.
func TestReadCgroupFiles(t *testing.T) {
	write := func(dir, name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v1cpu, v1mem, v2 := t.TempDir(), t.TempDir(), t.TempDir()
	write(v1cpu, "cpuacct.usage", "12081806983\n")
	write(v1cpu, "cpu.stat", "nr_periods 10\nnr_throttled 0\nthrottled_time 0\n")
	write(v1mem, "memory.usage_in_bytes", "38653952\n")
	write(v1mem, "memory.stat", "cache 16441344\nrss 19218432\nshmem 13041664\ntotal_cache 16441344\ntotal_rss 19218432\ntotal_shmem 13041664\ntotal_inactive_file 3309568\n")
	write(v2, "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
	write(v2, "memory.current", "50000000\n")
	write(v2, "memory.stat", "anon 30000000\nfile 15000000\nshmem 5000000\n")

	if cpu, ok := readCPU(v1cpu); !ok || cpu != 12081806983 {
		t.Errorf("v1 cpu %v %v", cpu, ok)
	}
	if _, ok := readCPU(v1mem); ok {
		t.Error("cpu read from a memory cgroup")
	}
	used, cache, ok := readMemory(v1mem)
	if !ok || cache != 16441344-13041664 || used != 38653952-cache {
		t.Errorf("v1 memory used %d cache %d %v", used, cache, ok)
	}
	if cpu, ok := readCPU(v2); !ok || cpu != 2500*time.Millisecond {
		t.Errorf("v2 cpu %v %v", cpu, ok)
	}
	used, cache, ok = readMemory(v2)
	if !ok || cache != 10000000 || used != 40000000 {
		t.Errorf("v2 memory used %d cache %d %v", used, cache, ok)
	}
	if _, _, ok := readMemory(v1cpu); ok {
		t.Error("memory read from a cpu cgroup")
	}
}
