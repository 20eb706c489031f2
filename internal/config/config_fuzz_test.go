package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// FuzzParsePools: what ParsePools accepts is within bounds and survives
// being written back out; what it refuses is an error, never a panic.
func FuzzParsePools(f *testing.F) {
	for _, seed := range []string{"", "base=2:8", "base=4", "a=0:0,b=1:1000", "base=8:2", "=1:2", "base=-1:2",
		"base=1:1001", "base=:", " base = 1:2 ,", "a=1:2:3", "base=9223372036854775807"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		pools, err := ParsePools(v)
		if err != nil {
			return
		}
		var parts []string
		for _, p := range pools {
			if p.Template == "" || p.Min < 0 || p.Max < p.Min || p.Max > 1000 {
				t.Fatalf("ParsePools(%q) accepted %+v", v, p)
			}
			parts = append(parts, fmt.Sprintf("%s=%d:%d", p.Template, p.Min, p.Max))
		}
		again, err := ParsePools(strings.Join(parts, ","))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(pools) {
			t.Fatalf("ParsePools(%q) = %+v, written back and parsed: %+v %v", v, pools, again, err)
		}
	})
}

// FuzzLoad feeds arbitrary values to every SPACE_* variable Load reads and
// arbitrary flags: Load answers with a config that validates or an error.
func FuzzLoad(f *testing.F) {
	f.Add("10.246.0.0/16", "30s", "base=1:2", "2", "true", "--log-level=debug")
	f.Add("::1/128", "-5s", "x", "0", "maybe", "--pool=base=1:1")
	f.Add("10.0.0.0/30", "0", "", "65", "1", "--sandbox-cidr=1.2.3.4/8")
	f.Add("bogus", "1h", "a=2:1", "x", "", "--default-timeout=25h")
	f.Add("10.0.0.0/8", "9999999h", "base=0", "64", "false", "--nope")
	runsc, err := os.Executable() // any existing file stands in for runsc
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cidr, timeout, pool, boots, debug, flag string) {
		env := map[string]string{
			"SPACE_DATA_DIR": "/var/lib/space-fuzz", "SPACE_RUNSC": runsc,
			"SPACE_SANDBOX_CIDR": cidr, "SPACE_DEFAULT_TIMEOUT": timeout, "SPACE_AGENT_BOOT_TIMEOUT": timeout,
			"SPACE_POOL": pool, "SPACE_POOL_BOOTS": boots, "SPACE_RUNSC_DEBUG": debug,
		}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		cfg, err := Load([]string{flag}, lookup)
		if err != nil {
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("Load accepted a config that does not validate: %v", verr)
		}
		if cfg.PoolBoots < 1 || cfg.DefaultTimeout <= 0 || cfg.DefaultTimeout > cfg.MaxTimeout {
			t.Fatalf("Load accepted %+v", cfg)
		}
	})
}
