package config

import (
	"fmt"
	"os"
	"path/filepath"
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
		{name: "bad image limit", env: map[string]string{"SPACE_TEMPLATE_MAX_IMAGE": "0"}, wantErr: "SPACE_TEMPLATE_MAX_IMAGE: want a positive number of bytes"},
		{name: "negative node budget", env: map[string]string{"SPACE_NODE_MEMORY_MB": "-1"}, wantErr: "SPACE_NODE_MEMORY_MB: want an integer from 0"},
		{name: "bad node budget", env: map[string]string{"SPACE_NODE_MAX_SANDBOXES": "many"}, wantErr: "integer"},
		{name: "bad level", args: []string{"-log-level", "loud"}, wantErr: `log_level (SPACE_LOG_LEVEL): "loud" is not one of`},
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
		{name: "bad node id", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a b"}, wantErr: "node_id (SPACE_NODE_ID)"},
		{name: "bad node address", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a", "SPACE_NODE_ADDRESS": "10.0.0.1:80"}, wantErr: "node_address (SPACE_NODE_ADDRESS)"},
		{name: "bad node lease", env: map[string]string{"SPACE_DATABASE_URL": "postgres://db", "SPACE_NODE_ID": "a", "SPACE_NODE_LEASE": "10ms"}, wantErr: "node_lease (SPACE_NODE_LEASE)"},
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

// TestREADMETable: the README's settings table is the one generated from
// the settings (SPACE_WRITE_README=1 rewrites it).
func TestREADMETable(t *testing.T) {
	const path = "../../README.md"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- settings: generated by internal/config (SPACE_WRITE_README=1 go test ./internal/config) -->\n", "<!-- settings end -->\n"
	i, j := strings.Index(string(readme), begin), strings.Index(string(readme), end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the settings table's markers %q and %q", begin, end)
	}
	want := string(readme[:i]) + begin + MarkdownTable() + string(readme[j:])
	if want == string(readme) {
		return
	}
	if os.Getenv("SPACE_WRITE_README") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's settings table is not the generated one: run SPACE_WRITE_README=1 go test ./internal/config")
}

// TestSettingsNamed: every setting has a key, a default and a meaning, and
// no two share a key.
func TestSettingsNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settings {
		if !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(s.Key) || s.Default == "" || s.Doc == "" || s.set == nil || s.get == nil {
			t.Errorf("setting %+v is incomplete", s.Key)
		}
		if seen[s.Key] {
			t.Errorf("two settings named %s", s.Key)
		}
		seen[s.Key] = true
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spaced.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFile: a file's settings apply under the environment's and the
// flags'; a bad file is refused naming the file, the line and the key.
func TestConfigFile(t *testing.T) {
	good := writeFile(t, "addr: 127.0.0.1:8080\ndata_dir: /srv/space\npool: [base=1:2, py=3]\negress_floor:\n  - 203.0.113.0/24\n  - 198.51.100.0/24\nruncs_unused:\n")
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		args    []string
		check   func(Config) string
		wantErr string
	}{
		{name: "unknown key", file: good, wantErr: `line 7: unknown key "runcs_unused"`},
		{
			name: "file under env under flags",
			file: writeFile(t, "addr: 127.0.0.1:8080\ndata_dir: /srv/space\ndefault_timeout: 1m\npool: [base=1:2, py=3]\negress_floor:\n  - 203.0.113.0/24\n  - 198.51.100.0/24\n"),
			env:  map[string]string{"SPACE_DATA_DIR": "/env/space", "SPACE_DEFAULT_TIMEOUT": "2m"},
			args: []string{"-default-timeout", "3m"},
			check: func(c Config) string {
				if c.Addr != "127.0.0.1:8080" || c.DataDir != "/env/space" || c.TemplatesDir != "/env/space/templates" || c.DefaultTimeout != 3*time.Minute {
					return fmt.Sprintf("precedence: %+v", c)
				}
				if len(c.Pools) != 2 || c.Pools[1] != (PoolConfig{"py", 3, 3}) || len(c.EgressFloor) != 2 {
					return fmt.Sprintf("lists: pools %+v floor %v", c.Pools, c.EgressFloor)
				}
				return ""
			},
		},
		{name: "bad value", file: writeFile(t, "addr: x\n\ndefault_timeout: soon\n"), wantErr: `line 3: default_timeout: want a duration`},
		{name: "invalid after load", file: writeFile(t, "data_dir: relative\n"), wantErr: `data_dir (SPACE_DATA_DIR): "relative" must be an absolute path`},
		{name: "set twice", file: writeFile(t, "addr: a:1\naddr: b:2\n"), wantErr: "line 2: addr is set twice"},
		{name: "not a mapping", file: writeFile(t, "- addr\n"), wantErr: "want a mapping"},
		{name: "nested value", file: writeFile(t, "pool: {base: 2}\n"), wantErr: "line 1: pool: want a value or a list"},
		{name: "missing file", file: "/nonexistent/spaced.yaml", wantErr: "config file: open /nonexistent/spaced.yaml"},
		{name: "empty file", file: writeFile(t, ""), check: func(c Config) string {
			if c.Addr != Default().Addr {
				return "an empty file changed a setting"
			}
			return ""
		}},
		{name: "file from SPACE_CONFIG", env: map[string]string{"SPACE_CONFIG": writeFile(t, "log_level: debug\n")}, check: func(c Config) string {
			if c.LogLevel != "debug" {
				return "SPACE_CONFIG not read"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"SPACE_RUNSC": "/bin/true"}
			for k, v := range tt.env {
				env[k] = v
			}
			args := tt.args
			if tt.file != "" {
				args = append([]string{"-config", tt.file}, args...)
			}
			c, err := Load(args, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
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

// TestPrintReadsBack: what Print writes, Load reads back to the same
// settings, with secrets redacted (and so not read back).
func TestPrintReadsBack(t *testing.T) {
	env := map[string]string{"SPACE_RUNSC": "/bin/true", "SPACE_POOL": "base=1:3", "SPACE_EGRESS_FLOOR": "203.0.113.0/24",
		"SPACE_S3_SECRET_KEY": "s3-secret-value", "SPACE_RUNSC_DEBUG": "true", "SPACE_TENANT_CREATES_PER_SECOND": "2.5"}
	lookupEnv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := Load(nil, lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	out := string(c.Print())
	if strings.Contains(out, "s3-secret-value") || !strings.Contains(out, `s3_secret_key: "<redacted>"`) {
		t.Fatalf("the secret is not redacted:\n%s", out)
	}
	again, err := Load([]string{"-config", writeFile(t, out)}, func(k string) (string, bool) {
		if k == "SPACE_RUNSC" {
			return "/bin/true", true
		}
		return "", false
	})
	if err != nil {
		t.Fatalf("Load of the printed config: %v\n%s", err, out)
	}
	again.S3SecretKey = c.S3SecretKey
	if fmt.Sprint(again) != fmt.Sprint(c) {
		t.Fatalf("printed and read back:\n%+v\nwant\n%+v", again, c)
	}
}
