package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(Config) string
		wantErr string
	}{
		{
			name: "defaults",
			check: func(c Config) string {
				if c.Addr != "127.0.0.1:7070" || c.DataDir != "/var/lib/space" || c.TemplatesDir != "/var/lib/space/templates" {
					return "unexpected defaults"
				}
				return ""
			},
		},
		{
			name: "env then flags",
			env:  map[string]string{"SPACE_ADDR": "127.0.0.1:9", "SPACE_DATA_DIR": "/tmp/x"},
			args: []string{"-addr", "127.0.0.1:10", "-default-timeout", "10s"},
			check: func(c Config) string {
				if c.Addr != "127.0.0.1:10" || c.DataDir != "/tmp/x" || c.TemplatesDir != "/tmp/x/templates" || c.DefaultTimeout != 10*time.Second {
					return "flags or env not applied"
				}
				return ""
			},
		},
		{name: "relative data dir", env: map[string]string{"SPACE_DATA_DIR": "rel"}, wantErr: "absolute"},
		{name: "bad cidr", env: map[string]string{"SPACE_SANDBOX_CIDR": "fd00::/64"}, wantErr: "IPv4"},
		{
			name: "pools",
			env:  map[string]string{"SPACE_POOL": "base=1:4, py=3"},
			check: func(c Config) string {
				if len(c.Pools) != 2 || c.Pools[0] != (PoolConfig{"base", 1, 4}) || c.Pools[1] != (PoolConfig{"py", 3, 3}) {
					return "pools not parsed"
				}
				return ""
			},
		},
		{
			name: "pools off",
			env:  map[string]string{"SPACE_POOL": ""},
			check: func(c Config) string {
				if len(c.Pools) != 0 {
					return "pools not turned off"
				}
				return ""
			},
		},
		{name: "bad pool", env: map[string]string{"SPACE_POOL": "base=5:2"}, wantErr: "min <= max"},
		{
			name: "node budgets",
			env:  map[string]string{"SPACE_NODE_MEMORY_MB": "2048", "SPACE_NODE_DISK_MB": "10000", "SPACE_NODE_MAX_SANDBOXES": "50"},
			check: func(c Config) string {
				if c.NodeMemoryMB != 2048 || c.NodeDiskMB != 10000 || c.NodeMaxSandboxes != 50 {
					return "node budgets not parsed"
				}
				return ""
			},
		},
		{
			name: "node budgets derived by default",
			check: func(c Config) string {
				if c.NodeMemoryMB != 0 || c.NodeDiskMB != 0 || c.NodeMaxSandboxes != 0 {
					return "node budgets set without being asked"
				}
				return ""
			},
		},
		{
			name: "template limits",
			env:  map[string]string{"SPACE_TEMPLATE_MAX_UPLOAD": "1000", "SPACE_TEMPLATE_MAX_IMAGE": "2000"},
			check: func(c Config) string {
				if c.TemplateMaxUpload != 1000 || c.TemplateMaxImage != 2000 {
					return "template limits not parsed"
				}
				return ""
			},
		},
		{
			name: "template image limit by default",
			check: func(c Config) string {
				if c.TemplateMaxImage != 16<<30 {
					return "default image limit is not 16 GiB"
				}
				return ""
			},
		},
		{name: "bad image limit", env: map[string]string{"SPACE_TEMPLATE_MAX_IMAGE": "0"}, wantErr: "SPACE_TEMPLATE_MAX_IMAGE must be a positive number"},
		{name: "negative node budget", env: map[string]string{"SPACE_NODE_MEMORY_MB": "-1"}, wantErr: "node budgets"},
		{name: "bad node budget", env: map[string]string{"SPACE_NODE_MAX_SANDBOXES": "many"}, wantErr: "integer"},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: "log level"},
		{
			name: "cluster",
			env:  map[string]string{"SPACE_DATABASE_URL": "postgres://db/space", "SPACE_NODE_ID": "n1", "SPACE_NODE_ADDRESS": "http://10.0.0.1:7070", "SPACE_NODE_LEASE": "5s"},
			check: func(c Config) string {
				if c.DatabaseURL != "postgres://db/space" || c.NodeID != "n1" || c.NodeAddress != "http://10.0.0.1:7070" || c.NodeLease != 5*time.Second {
					return fmt.Sprintf("cluster settings not parsed: %+v", c)
				}
				return ""
			},
		},
		{
			name: "cluster defaults",
			env:  map[string]string{"SPACE_DATABASE_URL": "postgres://db/space"},
			check: func(c Config) string {
				if c.NodeID == "" || !strings.HasPrefix(c.NodeAddress, "http://") || c.NodeLease != 15*time.Second {
					return fmt.Sprintf("cluster defaults: id %q address %q lease %s", c.NodeID, c.NodeAddress, c.NodeLease)
				}
				return ""
			},
		},
		{name: "bad node id", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a b"}, wantErr: "node id"},
		{name: "bad node address", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a", "SPACE_NODE_ADDRESS": "10.0.0.1:80"}, wantErr: "node address"},
		{name: "bad node lease", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a", "SPACE_NODE_LEASE": "10ms"}, wantErr: "node lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"SPACE_RUNSC": "/bin/true"}
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := Load(tt.args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(c); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

// TestREADMEListsEveryVariable: every environment variable Load reads is
// in the README's table, so an operator can find each setting.
func TestREADMEListsEveryVariable(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`"(SPACE_[A-Z0-9_]+)"`).FindAllSubmatch(src, -1)
	if len(vars) < 20 {
		t.Fatalf("found only %d variables in config.go: the pattern is wrong", len(vars))
	}
	for _, v := range vars {
		if !strings.Contains(string(readme), "`"+string(v[1])+"`") {
			t.Errorf("README.md does not document %s", v[1])
		}
	}
}
