package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// A setting is one of spaced's knobs, named the same everywhere: Key in a
// config file ("data_dir"), Env() in the environment ("SPACE_DATA_DIR")
// and Flag() on the command line ("-data-dir"). The table below is the one
// source of every setting: Load reads it, `spaced config print` writes it
// and the README's settings table is generated from it.
type setting struct {
	Key     string
	Default string // as an operator reads it (the README's "default" column)
	Doc     string
	// Secret values are printed as "<redacted>".
	Secret bool
	// EmptyIsValue: an empty value is a value ("" turns pools off), not
	// "unset".
	EmptyIsValue bool
	// Bool settings are flags that need no value (-runsc-debug).
	Bool bool
	set  func(c *Config, v string) error
	get  func(c Config) string
}

// Env is the setting's environment variable.
func (s setting) Env() string { return "SPACE_" + strings.ToUpper(s.Key) }

// Flag is the setting's command-line flag.
func (s setting) Flag() string { return strings.ReplaceAll(s.Key, "_", "-") }

func stringSetting(key string, field func(*Config) *string, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc,
		set: func(c *Config, v string) error { *field(c) = v; return nil },
		get: func(c Config) string { return *field(&c) }}
}

func secretSetting(key string, field func(*Config) *string, def, doc string) setting {
	s := stringSetting(key, field, def, doc)
	s.Secret = true
	return s
}

func durationSetting(key string, field func(*Config) *time.Duration, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc,
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("want a duration such as 30s, 5m or 24h, not %q", v)
			}
			*field(c) = d
			return nil
		},
		get: func(c Config) string { return field(&c).String() }}
}

// intSetting takes an integer within [lo, hi].
func intSetting(key string, field func(*Config) *int, lo, hi int, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc,
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				return fmt.Errorf("want an integer from %d to %d, not %q", lo, hi, v)
			}
			*field(c) = n
			return nil
		},
		get: func(c Config) string { return strconv.Itoa(*field(&c)) }}
}

// quotaSetting is a tenant quota or node budget: 0 (none, or derived) or positive.
func quotaSetting(key string, field func(*Config) *int, def, doc string) setting {
	return intSetting(key, field, 0, 1<<31-1, def, doc)
}

func bytesSetting(key string, field func(*Config) *int64, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc,
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("want a positive number of bytes, not %q", v)
			}
			*field(c) = n
			return nil
		},
		get: func(c Config) string { return strconv.FormatInt(*field(&c), 10) }}
}

func boolSetting(key string, field func(*Config) *bool, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc, Bool: true,
		set: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, not %q", v)
			}
			*field(c) = b
			return nil
		},
		get: func(c Config) string { return strconv.FormatBool(*field(&c)) }}
}

func prefixesSetting(key string, field func(*Config) *[]netip.Prefix, def, doc string) setting {
	return setting{Key: key, Default: def, Doc: doc,
		set: func(c *Config, v string) error {
			p, err := policy.ParsePrefixes(v)
			if err != nil {
				return err
			}
			*field(c) = p
			return nil
		},
		get: func(c Config) string {
			var out []string
			for _, p := range *field(&c) {
				out = append(out, p.String())
			}
			return strings.Join(out, ",")
		}}
}

// settings is every setting, in the order the README lists them.
var settings = []setting{
	stringSetting("addr", func(c *Config) *string { return &c.Addr }, "`127.0.0.1:7070`", "listen address"),
	stringSetting("data_dir", func(c *Config) *string { return &c.DataDir }, "`/var/lib/space`", "state store, sandbox bundles, runsc state, API key"),
	secretSetting("api_key", func(c *Config) *string { return &c.APIKey }, "generated", "the admin key (`Authorization: Bearer` or `X-API-Key`); tenants' keys are issued through it"),
	stringSetting("templates_dir", func(c *Config) *string { return &c.TemplatesDir }, "`$SPACE_DATA_DIR/templates`", "built templates"),
	stringSetting("runsc", func(c *Config) *string { return &c.RunscPath }, "`/usr/local/lib/space/bin/runsc`", "the runsc binary"),
	{Key: "sandbox_cidr", Default: "`10.240.0.0/16`", Doc: "carved into one /30 per sandbox",
		set: func(c *Config, v string) error {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return fmt.Errorf("want an IPv4 CIDR such as 10.240.0.0/16, not %q", v)
			}
			c.SandboxCIDR = p
			return nil
		},
		get: func(c Config) string { return c.SandboxCIDR.String() }},
	durationSetting("default_timeout", func(c *Config) *time.Duration { return &c.DefaultTimeout }, "`5m`", "sandbox lifetime when a create names none"),
	durationSetting("max_timeout", func(c *Config) *time.Duration { return &c.MaxTimeout }, "`24h`", "the longest timeout a create, resume, fork or set-timeout may ask for (1s to 720h)"),
	intSetting("default_cpu", func(c *Config) *int { return &c.DefaultCPU }, 1, 64, "`2`", "a sandbox's vCPUs when its create names none (1 to 64)"),
	intSetting("default_memory_mb", func(c *Config) *int { return &c.DefaultMemoryMB }, 64, 65536, "`512`", "a sandbox's memory when its create names none"),
	intSetting("default_disk_mb", func(c *Config) *int { return &c.DefaultDiskMB }, 16, 1<<20, "`1024`", "the size of a sandbox's writable layer when its create names none"),
	intSetting("default_max_processes", func(c *Config) *int { return &c.DefaultMaxProcesses }, 16, 65536, "`1024`", "a sandbox's process limit when its create names none"),
	durationSetting("agent_boot_timeout", func(c *Config) *time.Duration { return &c.AgentBootTimeout }, "`15s`", "how long a new sandbox's agent may take to answer"),
	durationSetting("metrics_interval", func(c *Config) *time.Duration { return &c.MetricsInterval }, "`5s`", "how often each running sandbox's CPU, memory and disk are sampled (`space metrics`, E2B metrics)"),
	intSetting("volume_default_mb", func(c *Config) *int { return &c.VolumeDefaultMB }, 16, 1<<30, "`1024`", "a volume's size when its create names none"),
	intSetting("volume_max_mb", func(c *Config) *int { return &c.VolumeMaxMB }, 16, 1<<30, "`65536`", "the largest volume allowed"),
	{Key: "pool", Default: "`base=2:8,code-interpreter-v1=1:4`", EmptyIsValue: true,
		Doc: "warm pools, `template=min:max,...` (a pool grows toward its max while creates miss it, and shrinks back a step per quiet minute; a pool of a template not built yet waits for it); empty turns pooling off",
		set: func(c *Config, v string) error {
			p, err := ParsePools(v)
			if err != nil {
				return err
			}
			c.Pools = p
			return nil
		},
		get: func(c Config) string {
			var out []string
			for _, p := range c.Pools {
				out = append(out, fmt.Sprintf("%s=%d:%d", p.Template, p.Min, p.Max))
			}
			return strings.Join(out, ",")
		}},
	intSetting("pool_boots", func(c *Config) *int { return &c.PoolBoots }, 1, 64, "`1`", "how many pool sandboxes may boot at once (bounds the refill's share of the CPU)"),
	intSetting("max_boots", func(c *Config) *int { return &c.MaxBoots }, 1, 1024, "`2 x CPUs`, at least 4", "how many sandboxes creates boot at once when no pool serves them; more wait their turn (the wait does not count against the agent's boot timeout)"),
	quotaSetting("node_memory_mb", func(c *Config) *int { return &c.NodeMemoryMB }, "80% of `MemTotal`", "the memory this node's sandboxes may take, as measured (their cgroups' working set), plus what starts in flight are reserved; a create, resume or fork past it gets 503 `node_at_capacity` (warm pools give up their idle sandboxes first)"),
	quotaSetting("node_disk_mb", func(c *Config) *int { return &c.NodeDiskMB }, "80% of the data dir's filesystem", "the same for the disk their writable layers take"),
	quotaSetting("node_max_sandboxes", func(c *Config) *int { return &c.NodeMaxSandboxes }, "the fewer of the sandbox range's /30 slots and `pid_max`/32", "how many sandboxes (running, pooled, booting) the node holds"),
	quotaSetting("tenant_max_sandboxes", func(c *Config) *int { return &c.TenantQuotas.Sandboxes }, "`100`", "running sandboxes of a tenant that sets no quota of its own (0: no limit); tenant quotas bind issued keys, never the admin key"),
	quotaSetting("tenant_max_vcpu", func(c *Config) *int { return &c.TenantQuotas.VCPU }, "none", "the vCPUs of a tenant's running sandboxes"),
	quotaSetting("tenant_max_memory_mb", func(c *Config) *int { return &c.TenantQuotas.MemoryMB }, "none", "the memory of a tenant's running sandboxes"),
	quotaSetting("tenant_max_builds", func(c *Config) *int { return &c.TenantQuotas.Builds }, "`2`", "template builds queued or running at once (both APIs); a build's vCPUs and memory count in the tenant's vCPU and memory quotas while it lasts, its sandboxes not among its running sandboxes"),
	quotaSetting("tenant_max_paused", func(c *Config) *int { return &c.TenantQuotas.PausedSandboxes }, "`1000`", "a tenant's paused sandboxes"),
	quotaSetting("tenant_max_paused_mb", func(c *Config) *int { return &c.TenantQuotas.PausedMB }, "none", "the MiB of a tenant's paused sandboxes' checkpoints"),
	quotaSetting("tenant_max_snapshots", func(c *Config) *int { return &c.TenantQuotas.Snapshots }, "`1000`", "a tenant's snapshots"),
	quotaSetting("tenant_max_snapshot_mb", func(c *Config) *int { return &c.TenantQuotas.SnapshotMB }, "none", "the MiB of a tenant's snapshots"),
	quotaSetting("tenant_max_templates", func(c *Config) *int { return &c.TenantQuotas.Templates }, "`100`", "a tenant's templates"),
	quotaSetting("tenant_max_template_mb", func(c *Config) *int { return &c.TenantQuotas.TemplateMB }, "none", "the MiB of a tenant's templates' builds"),
	{Key: "tenant_creates_per_second", Default: "`20`", Doc: "each tenant's rate of creates, resumes and forks (429 past it)",
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return fmt.Errorf("want a number >= 0, not %q", v)
			}
			c.TenantQuotas.CreatesPerSecond = f
			return nil
		},
		get: func(c Config) string { return strconv.FormatFloat(c.TenantQuotas.CreatesPerSecond, 'g', -1, 64) }},
	quotaSetting("tenant_creates_burst", func(c *Config) *int { return &c.TenantQuotas.CreatesBurst }, "`40`", "the burst above that rate"),
	secretSetting("metrics_token", func(c *Config) *string { return &c.MetricsToken }, "none", "a bearer token (16 characters or more) that reads `/metrics` beside the admin key, for a Prometheus server"),
	durationSetting("audit_retention", func(c *Config) *time.Duration { return &c.AuditRetention }, "`720h`", "how long the audit log (`/v1/admin/audit`) keeps an entry"),
	secretSetting("database_url", func(c *Config) *string { return &c.DatabaseURL }, "none", "cluster mode: the PostgreSQL catalog this node shares with others (see [docs/cluster.md](docs/cluster.md)); unset, the node keeps its state in `$SPACE_DATA_DIR/state.db`"),
	stringSetting("node_id", func(c *Config) *string { return &c.NodeID }, "host name", "cluster mode: this node's name"),
	stringSetting("node_address", func(c *Config) *string { return &c.NodeAddress }, "`http://<host name>:<port>`", "cluster mode: the URL the other nodes reach this node's API on"),
	durationSetting("node_lease", func(c *Config) *time.Duration { return &c.NodeLease }, "`15s`", "cluster mode: how long this node's registration holds without renewal"),
	stringSetting("log_level", func(c *Config) *string { return &c.LogLevel }, "`info`", "debug, info, warn, error"),
	stringSetting("debug_addr", func(c *Config) *string { return &c.DebugAddr }, "none", "serves Go's pprof there (keep it on loopback)"),
	boolSetting("runsc_debug", func(c *Config) *bool { return &c.RunscDebug }, "off", "runsc writes its debug logs into each sandbox's directory"),
	boolSetting("systrap_fast_path", func(c *Config) *bool { return &c.SystrapFastPath }, "off", "runsc's systrap fast path: a sandbox's sentry and stub threads spin instead of sleeping between its system calls. Off, commands took 13-22% less time at the median on a 2-core node, where the spinning takes the CPU the sandboxes need ([docs/benchmarks.md](docs/benchmarks.md)); try it on a node with cores to spare"),
	stringSetting("agent_binary", func(c *Config) *string { return &c.AgentBinary }, "the base template's own", "the agent put into every template image"),
	stringSetting("object_store", func(c *Config) *string { return &c.ObjectStore }, "`$SPACE_DATA_DIR/objects`", "where checkpoints and disk snapshots go: a directory, or `s3://bucket`"),
	stringSetting("s3_endpoint", func(c *Config) *string { return &c.S3Endpoint }, "AWS", "the S3 server (any S3 API: AWS, MinIO, versitygw)"),
	stringSetting("s3_region", func(c *Config) *string { return &c.S3Region }, "`us-east-1`", "the S3 region"),
	stringSetting("s3_access_key", func(c *Config) *string { return &c.S3AccessKey }, "none", "the S3 access key"),
	secretSetting("s3_secret_key", func(c *Config) *string { return &c.S3SecretKey }, "none", "the S3 secret key"),
	stringSetting("platform_key_file", func(c *Config) *string { return &c.PlatformKeyFile }, "`$SPACE_DATA_DIR/keys/platform.json`", "the platform key-encryption key (created 0600); nodes sharing an object store must share it"),
	stringSetting("customer_keys_file", func(c *Config) *string { return &c.CustomerKeysFile }, "none", "customer keys loaded at start, one `<key id> <32 bytes base64>` per line (else `PUT /v1/keys/{id}`)"),
	durationSetting("paused_retention", func(c *Config) *time.Duration { return &c.PausedRetention }, "`720h`", "how long a paused sandbox and its checkpoint are kept"),
	durationSetting("idle_freeze", func(c *Config) *time.Duration { return &c.IdleFreeze }, "`5m`", "how long a running sandbox may go without a request, stream or connection before it is frozen at rest (cgroup freezer: no CPU; still `running` in the APIs; the next request of any kind thaws it first); `0` never; a sandbox may set its own (`idle_freeze_seconds`). See [Rest tiers](docs/ARCHITECTURE.md#rest-tiers)"),
	durationSetting("idle_hibernate", func(c *Config) *time.Duration { return &c.IdleHibernate }, "`30m`", "how long a running sandbox may go without a request, stream or connection before it is hibernated: checkpointed to this node's disk (encrypted as every checkpoint is) and its memory given back; still `running` in the APIs; the next request of any kind restores it in place (same id, token, processes and open files) first; `0` never; longer than `idle_freeze` to matter; a sandbox may set its own (`idle_hibernate_seconds`). See [Rest tiers](docs/ARCHITECTURE.md#rest-tiers)"),
	stringSetting("egress_dns", func(c *Config) *string { return &c.EgressDNS }, "first `nameserver` of `/etc/resolv.conf`", "resolver the egress gateway asks, for sandboxes and for itself"),
	prefixesSetting("egress_floor", func(c *Config) *[]netip.Prefix { return &c.EgressFloor }, "none", "extra CIDRs no sandbox policy can open and no registry pull dials (comma-separated)"),
	stringSetting("egress_upstream_ca", func(c *Config) *string { return &c.EgressUpstreamCA }, "none", "PEM roots the gateway trusts, beside the host's, when it re-originates TLS for credential injection"),
	intSetting("template_builds", func(c *Config) *int { return &c.TemplateBuilds }, 1, 64, "`2`", "template builds running at once (more wait, queued)"),
	durationSetting("template_build_timeout", func(c *Config) *time.Duration { return &c.TemplateBuildTimeout }, "`30m`", "how long one template build may take"),
	durationSetting("template_cache_ttl", func(c *Config) *time.Duration { return &c.TemplateCacheTTL }, "`168h`", "how long template images, layers and uploads that nothing uses are kept"),
	durationSetting("template_gc_interval", func(c *Config) *time.Duration { return &c.TemplateGCInterval }, "`1h`", "how often unused template images, layers and uploads are collected"),
	bytesSetting("template_max_upload", func(c *Config) *int64 { return &c.TemplateMaxUpload }, "`4294967296` (4 GiB)", "the largest upload (a build context, an image archive), in bytes: 413 past it, before a byte is read when the request declares its length; every other request body has its route's bound (1 MiB for JSON), except files written into a sandbox or a volume, which their own disk bounds"),
	bytesSetting("template_max_context", func(c *Config) *int64 { return &c.TemplateMaxContext }, "`1073741824` (1 GiB)", "the most an uploaded file set expands to as a build reads it (a small gzip unpacks to far more), and the most one tenant's builds hold of expanded file sets on the node at once: a COPY past it fails the build, saying so. Uploads and expansions are also refused (507) when they would take the node's disk below its floor (5% of it, at most 2 GiB)"),
	bytesSetting("template_max_image", func(c *Config) *int64 { return &c.TemplateMaxImage }, "`17179869184` (16 GiB)", "the most a build unpacks on the host, in bytes: a registry or uploaded image whose compressed layers are over it is refused (413) when the build is asked for; one that unpacks past it as it streams, a step's layer over it, and a stored layer over it fail the build there, saying so, and leave nothing behind"),
	prefixesSetting("registry_allow", func(c *Config) *[]netip.Prefix { return &c.RegistryAllow }, "none", "CIDRs that builds may pull images from although they are in the platform floor (loopback, private, link-local, metadata), in `SPACE_EGRESS_FLOOR`, or addresses of this host or of its cluster's nodes, for a private registry; registries at other public addresses need no entry"),
	prefixesSetting("webhook_allow", func(c *Config) *[]netip.Prefix { return &c.WebhookAllow }, "none", "CIDRs that lifecycle webhooks (E2B's `/events/webhooks`) may deliver to although they are in the platform floor, in `SPACE_EGRESS_FLOOR`, or addresses of this host or of its cluster's nodes: a receiver on a private network the operator trusts; without it such a URL is refused at registration (400) and at delivery"),
	intSetting("webhook_queue", func(c *Config) *int { return &c.WebhookQueue }, 1, 1<<30, "`10000`", "webhook deliveries a tenant may have waiting (kept in the catalog); what comes beyond is dropped, logged and counted (`space_webhook_events_dropped_total{reason=\"queue_full\"}`)"),
	durationSetting("webhook_retry_max", func(c *Config) *time.Duration { return &c.WebhookRetryMax }, "`5m`", "the longest wait between two attempts of a webhook delivery (the wait starts at 1s and doubles); a delivery is retried for 24h"),
}

// lookup answers the setting of a key.
func lookup(key string) (setting, bool) {
	for _, s := range settings {
		if s.Key == key {
			return s, true
		}
	}
	return setting{}, false
}

// Variables lists the environment variables spaced reads: every
// setting's, and SPACE_CONFIG (the config file).
func Variables() []string {
	out := []string{"SPACE_CONFIG"}
	for _, s := range settings {
		out = append(out, s.Env())
	}
	return out
}
