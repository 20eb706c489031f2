// Package config is spaced's typed configuration: safe defaults that work
// with no file, overridden by SPACE_* environment variables, then by flags,
// and checked once by Validate before anything starts.
package config

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// Config is everything spaced needs to start.
type Config struct {
	// DataDir holds the state store, sandbox bundles, runsc state and the API key.
	DataDir string
	// Addr is the listen address of the public API.
	Addr string
	// APIKey, when empty, is read from (or generated into) DataDir/api-key.
	APIKey string
	// TemplatesDir holds built templates: <dir>/<name>/current is the root filesystem.
	TemplatesDir string
	// RunscPath is the runsc binary.
	RunscPath string
	// SandboxCIDR is carved into one /30 per sandbox for its veth pair.
	SandboxCIDR netip.Prefix
	// DefaultTimeout is a sandbox's lifetime when the create request names none.
	DefaultTimeout time.Duration
	// MaxTimeout bounds any requested timeout.
	MaxTimeout time.Duration
	// Defaults for per-sandbox limits.
	DefaultCPU          int
	DefaultMemoryMB     int
	DefaultDiskMB       int
	DefaultMaxProcesses int
	// VolumeDefaultMB is the size of a volume made without one, and
	// VolumeMaxMB the largest a volume may be (SPACE_VOLUME_DEFAULT_MB,
	// SPACE_VOLUME_MAX_MB).
	VolumeDefaultMB int
	VolumeMaxMB     int
	// TenantQuotas are the quotas of a tenant that sets none of its own
	// (SPACE_TENANT_MAX_SANDBOXES, _MAX_VCPU, _MAX_MEMORY_MB, _MAX_BUILDS, _MAX_PAUSED,
	// _MAX_PAUSED_MB, _MAX_SNAPSHOTS, _MAX_SNAPSHOT_MB, _MAX_TEMPLATES,
	// _MAX_TEMPLATE_MB, SPACE_TENANT_CREATES_PER_SECOND, _CREATES_BURST;
	// 0: no limit). They bind issued keys, never the admin key.
	TenantQuotas store.Quotas
	// MetricsToken, if set, is a bearer token that reads /metrics (for a
	// Prometheus server) beside the admin key (SPACE_METRICS_TOKEN).
	MetricsToken string
	// AuditRetention is how long the audit log keeps an entry.
	AuditRetention time.Duration
	// LogLevel is one of debug, info, warn, error.
	LogLevel string
	// AgentBootTimeout bounds how long a new sandbox's agent may take to answer.
	AgentBootTimeout time.Duration
	// Pools are the warm pools per template (SPACE_POOL, "base=2:8,other=0:4";
	// a max of 0 turns a template's pool off).
	Pools []PoolConfig
	// PoolBoots bounds how many pool sandboxes boot at the same time.
	PoolBoots int
	// MaxBoots bounds how many sandboxes creates boot at the same time
	// (cold creates, when no pool serves them); more wait their turn.
	MaxBoots int
	// DebugAddr, when set, serves net/http/pprof there (keep it on loopback).
	DebugAddr string
	// RunscDebug writes runsc debug logs into each sandbox's directory.
	RunscDebug bool
	// SystrapFastPath leaves runsc's systrap fast path on (spinning
	// instead of sleeping between a sandbox's system calls).
	SystrapFastPath bool
	// ObjectStore is where checkpoints and disk snapshots go: a local
	// directory (an absolute path; default <data-dir>/objects) or
	// "s3://bucket" with the S3* settings.
	ObjectStore string
	S3Endpoint  string
	S3Region    string
	S3AccessKey string
	S3SecretKey string
	// PlatformKeyFile holds the platform key-encryption key (a Tink keyset,
	// 0600; default <data-dir>/keys/platform.json). Nodes sharing an object
	// store must share it.
	PlatformKeyFile string
	// CustomerKeysFile, if set, holds customer keys loaded at start, one
	// "<key id> <32 bytes in base64>" per line.
	CustomerKeysFile string
	// PausedRetention is how long a paused sandbox is kept.
	PausedRetention time.Duration
	// IdleFreeze is how long a running sandbox may go without a request,
	// stream or connection before it is frozen at rest (no CPU; the next
	// request wakes it), unless it sets its own; 0: never.
	IdleFreeze time.Duration
	// IdleHibernate is how long a running sandbox may go unreached before
	// it is hibernated to this node's disk (0: never).
	IdleHibernate time.Duration
	// EgressDNS is the resolver ("host:port") the egress gateway asks for
	// sandboxes; empty means the host's first nameserver in /etc/resolv.conf.
	EgressDNS string
	// EgressFloor are the operator's additions to the addresses no sandbox
	// policy can open and no registry pull dials (SPACE_EGRESS_FLOOR,
	// comma-separated CIDRs).
	EgressFloor []netip.Prefix
	// EgressUpstreamCA is a PEM file of extra roots the gateway trusts
	// when it re-originates TLS (added to the host's roots).
	EgressUpstreamCA string
	// AgentBinary is the agent put into every template image; empty means
	// the one in the base template (<templates>/base/current).
	AgentBinary string
	// RegistryAllow are addresses that template builds may pull images
	// from although the tenant dialer refuses them (the platform floor,
	// EgressFloor, this node's and its cluster's addresses): a private
	// registry.
	RegistryAllow []netip.Prefix
	// WebhookAllow are addresses webhooks may deliver to although the
	// tenant dialer refuses them (as RegistryAllow is for pulls): a
	// receiver on a private network the operator trusts.
	WebhookAllow []netip.Prefix
	// WebhookQueue bounds the webhook deliveries a tenant has waiting;
	// WebhookRetryMax caps the wait between two attempts of one.
	WebhookQueue    int
	WebhookRetryMax time.Duration
	// TemplateBuilds bounds template builds running at once.
	TemplateBuilds int
	// TemplateBuildTimeout bounds one template build.
	TemplateBuildTimeout time.Duration
	// TemplateCacheTTL is how long unused template images, layers and
	// uploads are kept; TemplateGCInterval how often they are collected.
	TemplateCacheTTL   time.Duration
	TemplateGCInterval time.Duration
	// TemplateMaxUpload bounds one upload (a build context, an image archive).
	TemplateMaxUpload int64
	// TemplateMaxImage bounds what a build unpacks on the host: a registry
	// or uploaded image (its layers' compressed sizes when the build is
	// requested, its flattened files as they stream) and each layer a
	// step makes or an image is made of.
	TemplateMaxImage int64
	// TemplateMaxContext bounds what an uploaded file set expands to as a
	// build reads it, and what one tenant's builds hold of expanded file
	// sets on the node at once (a small gzip expands to far more).
	TemplateMaxContext int64
	// The node's budgets (admission control): the memory and the disk its
	// sandboxes may take, as measured on the host, and how many it may
	// hold; a create, resume or fork past one is refused with 503.
	// 0 derives them from the host at start: 80% of MemTotal, 80% of the
	// data dir's filesystem, and the fewer of the sandbox range's slots and
	// pid_max/32 (SPACE_NODE_MEMORY_MB, SPACE_NODE_DISK_MB,
	// SPACE_NODE_MAX_SANDBOXES).
	NodeMemoryMB     int
	NodeDiskMB       int
	NodeMaxSandboxes int
	// DatabaseURL, when set, is the cluster catalog (PostgreSQL) this
	// node shares with others; unset, the node keeps its state in its
	// own embedded store (SPACE_DATABASE_URL).
	DatabaseURL string
	// NodeID names this node in the cluster (default: the host name);
	// NodeAddress is the URL the other nodes reach its API on (default:
	// http://<host name>:<port of Addr>) (SPACE_NODE_ID, SPACE_NODE_ADDRESS).
	NodeID      string
	NodeAddress string
	// NodeLease is how long a node's registration holds without renewal:
	// a node silent longer has its sandboxes reported lost (SPACE_NODE_LEASE).
	NodeLease time.Duration
	// MetricsInterval is how often each running sandbox's CPU, memory and
	// disk are sampled (and its agent's log lines read) for its metrics
	// series and log (SPACE_METRICS_INTERVAL).
	MetricsInterval time.Duration
}

// PoolConfig sizes one template's warm pool.
type PoolConfig struct {
	Template string
	Min, Max int
}

// ParsePools reads "name=min:max,..." (or "name=max").
func ParsePools(v string) ([]PoolConfig, error) {
	var out []PoolConfig
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, sizes, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("pool %q: want name=min:max", part)
		}
		lo, hi, ranged := strings.Cut(sizes, ":")
		if !ranged { // "name=n": a fixed size
			lo, hi = sizes, sizes
		}
		minN, err1 := strconv.Atoi(lo)
		maxN, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || minN < 0 || maxN < minN || maxN > 1000 {
			return nil, fmt.Errorf("pool %q: sizes must be integers with 0 <= min <= max <= 1000", part)
		}
		out = append(out, PoolConfig{Template: name, Min: minN, Max: maxN})
	}
	return out, nil
}

// Default returns the configuration used when nothing is set.
func Default() Config {
	return Config{
		DataDir:         "/var/lib/space",
		Addr:            "127.0.0.1:7070",
		RunscPath:       "/usr/local/lib/space/bin/runsc",
		SandboxCIDR:     netip.MustParsePrefix("10.240.0.0/16"),
		DefaultTimeout:  300 * time.Second,
		MaxTimeout:      24 * time.Hour,
		DefaultCPU:      2,
		DefaultMemoryMB: 512,
		DefaultDiskMB:   1024,
		VolumeDefaultMB: 1024,
		VolumeMaxMB:     64 << 10,
		// Builds: a tenant's builds past 2 are refused, not queued without
		// bound behind the node's build slots (SPACE_TEMPLATE_BUILDS).
		TenantQuotas: store.Quotas{Sandboxes: 100, Builds: 2, PausedSandboxes: 1000, Snapshots: 1000, Templates: 100,
			CreatesPerSecond: 20, CreatesBurst: 40},
		AuditRetention:      30 * 24 * time.Hour,
		DefaultMaxProcesses: 1024,
		LogLevel:            "info",
		AgentBootTimeout:    15 * time.Second,
		// code-interpreter-v1 is what E2B's code-interpreter SDKs ask for;
		// its pool waits quietly until the template is built.
		Pools:                []PoolConfig{{Template: "base", Min: 2, Max: 8}, {Template: "code-interpreter-v1", Min: 1, Max: 4}},
		PoolBoots:            1,
		MaxBoots:             max(4, 2*goruntime.NumCPU()),
		PausedRetention:      30 * 24 * time.Hour,
		IdleFreeze:           5 * time.Minute,
		IdleHibernate:        30 * time.Minute,
		TemplateBuilds:       2,
		TemplateBuildTimeout: 30 * time.Minute,
		TemplateCacheTTL:     7 * 24 * time.Hour,
		TemplateGCInterval:   time.Hour,
		TemplateMaxUpload:    4 << 30,
		TemplateMaxImage:     16 << 30,
		TemplateMaxContext:   1 << 30,
		MetricsInterval:      5 * time.Second,
		NodeLease:            15 * time.Second,
		WebhookQueue:         10000,
		WebhookRetryMax:      5 * time.Minute,
	}
}

// Load builds the configuration from its sources, each over the one
// before: the defaults, a config file (-config FILE, else $SPACE_CONFIG,
// else none), the environment (read with lookupEnv, os.LookupEnv in
// spaced) and the flags in args.
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	c := Default()
	fs, flagged, file := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (settings are flags, such as -addr 127.0.0.1:7070)", fs.Arg(0))
	}
	if *file == "" {
		*file, _ = lookupEnv("SPACE_CONFIG")
	}
	if *file != "" {
		if err := c.applyFile(*file); err != nil {
			return c, err
		}
	}
	if err := c.applyEnv(lookupEnv); err != nil {
		return c, err
	}
	for _, f := range *flagged {
		if err := f.s.set(&c, f.value); err != nil {
			return c, fmt.Errorf("-%s: %w", f.s.Flag(), err)
		}
	}
	c.derive()
	return c, c.Validate()
}

// derive fills in the settings whose defaults come from others.
func (c *Config) derive() {
	if c.TemplatesDir == "" {
		c.TemplatesDir = filepath.Join(c.DataDir, "templates")
	}
	if c.ObjectStore == "" {
		c.ObjectStore = filepath.Join(c.DataDir, "objects")
	}
	if c.PlatformKeyFile == "" {
		c.PlatformKeyFile = filepath.Join(c.DataDir, "keys", "platform.json")
	}
	if c.DatabaseURL != "" {
		host, _ := os.Hostname()
		if c.NodeID == "" {
			c.NodeID = host
		}
		if c.NodeAddress == "" {
			_, port, _ := net.SplitHostPort(c.Addr)
			c.NodeAddress = "http://" + net.JoinHostPort(host, port)
		}
	}
}

// Usage writes spaced's flags and what each sets.
func Usage(w io.Writer) {
	fs, _, _ := newFlagSet()
	fs.SetOutput(w)
	fmt.Fprintf(w, "Usage: spaced [flags]\n       spaced config print [flags]   the effective settings as a config file (secrets redacted)\n       spaced keygen ...\n\nEach setting is a flag, a SPACE_* variable and a config file key (flags over variables over the file):\n")
	fs.PrintDefaults()
}

// flagValue is one setting given on the command line, applied after the
// file and the environment whatever its place among the flags.
type flagValue struct {
	s     setting
	value string
}

// newFlagSet answers spaced's flags: -config and one per setting.
func newFlagSet() (fs *flag.FlagSet, flagged *[]flagValue, file *string) {
	fs = flag.NewFlagSet("spaced", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Load answers errors; Usage prints the help
	flagged = new([]flagValue)
	file = fs.String("config", "", "a YAML file of settings, keys as in `spaced config print` (SPACE_CONFIG); the environment and flags override it")
	for _, s := range settings {
		// (backquotes in a usage text name the flag's value: none here)
		usage := strings.ReplaceAll(s.Doc, "`", "") + " (" + s.Env() + ")"
		record := func(v string) error { *flagged = append(*flagged, flagValue{s, v}); return nil }
		if s.Bool { // -runsc-debug alone means true
			fs.BoolFunc(s.Flag(), usage, record)
		} else {
			fs.Func(s.Flag(), usage, record)
		}
	}
	return fs, flagged, file
}

// applyEnv applies every SPACE_* variable that is set (and not empty,
// unless an empty value means something for that setting).
func (c *Config) applyEnv(lookupEnv func(string) (string, bool)) error {
	for _, s := range settings {
		v, ok := lookupEnv(s.Env())
		if !ok || v == "" && !s.EmptyIsValue {
			continue
		}
		if err := s.set(c, v); err != nil {
			return fmt.Errorf("%s: %w", s.Env(), err)
		}
	}
	return nil
}

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validateCluster checks the cluster settings (when a catalog is set).
func (c Config) validateCluster() error {
	if c.DatabaseURL == "" {
		return nil
	}
	if !nodeIDPattern.MatchString(c.NodeID) {
		return invalid("node_id", "%q must be 1-63 letters, digits, '.', '_' or '-'", c.NodeID)
	}
	u, err := url.Parse(c.NodeAddress)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
		return invalid("node_address", "%q must be an http(s) URL with a host and no path", c.NodeAddress)
	}
	if c.NodeLease < time.Second || c.NodeLease > 10*time.Minute {
		return invalid("node_lease", "%s must be between 1s and 10m", c.NodeLease)
	}
	return nil
}

// Validate reports the first setting that cannot work, naming its key and
// variable.
func (c Config) Validate() error {
	if err := c.validateCluster(); err != nil {
		return err
	}
	switch {
	case !filepath.IsAbs(c.DataDir):
		return invalid("data_dir", "%q must be an absolute path", c.DataDir)
	case !filepath.IsAbs(c.TemplatesDir):
		return invalid("templates_dir", "%q must be an absolute path", c.TemplatesDir)
	case c.Addr == "":
		return invalid("addr", "the listen address is empty")
	case !c.SandboxCIDR.Addr().Is4() || c.SandboxCIDR.Bits() > 28:
		return invalid("sandbox_cidr", "%s must be IPv4 and at least a /28", c.SandboxCIDR)
	case c.MaxTimeout < time.Second || c.MaxTimeout > 30*24*time.Hour:
		return invalid("max_timeout", "%s must be between 1s and 720h", c.MaxTimeout)
	case c.DefaultTimeout <= 0 || c.DefaultTimeout > c.MaxTimeout:
		return invalid("default_timeout", "%s must be in (0, %s] (max_timeout)", c.DefaultTimeout, c.MaxTimeout)
	case c.AgentBootTimeout <= 0:
		return invalid("agent_boot_timeout", "%s must be positive", c.AgentBootTimeout)
	case c.MaxBoots < 1:
		return invalid("max_boots", "must be at least 1")
	case c.DefaultCPU < 1 || c.DefaultCPU > 64:
		return invalid("default_cpu", "%d must be from 1 to 64", c.DefaultCPU)
	case c.DefaultMemoryMB < 64 || c.DefaultMemoryMB > 65536:
		return invalid("default_memory_mb", "%d must be from 64 to 65536", c.DefaultMemoryMB)
	case c.DefaultDiskMB < 16 || c.DefaultDiskMB > 1<<20:
		return invalid("default_disk_mb", "%d must be from 16 to 1048576", c.DefaultDiskMB)
	case c.DefaultMaxProcesses < 16 || c.DefaultMaxProcesses > 65536:
		return invalid("default_max_processes", "%d must be from 16 to 65536", c.DefaultMaxProcesses)
	case c.TemplateBuilds < 1 || c.TemplateBuilds > 64:
		return invalid("template_builds", "%d must be between 1 and 64", c.TemplateBuilds)
	case c.TemplateBuildTimeout < time.Second:
		return invalid("template_build_timeout", "%s must be at least 1s", c.TemplateBuildTimeout)
	case c.TemplateCacheTTL < time.Second:
		return invalid("template_cache_ttl", "%s must be at least 1s", c.TemplateCacheTTL)
	case c.TemplateGCInterval < time.Second:
		return invalid("template_gc_interval", "%s must be at least 1s", c.TemplateGCInterval)
	case c.MetricsInterval < 100*time.Millisecond || c.MetricsInterval > time.Minute:
		return invalid("metrics_interval", "%s must be between 100ms and 1m", c.MetricsInterval)
	case c.VolumeMaxMB < 16:
		return invalid("volume_max_mb", "%d MB must be at least 16 MB", c.VolumeMaxMB)
	case c.VolumeDefaultMB < 16 || c.VolumeDefaultMB > c.VolumeMaxMB:
		return invalid("volume_default_mb", "%d MB must be at least 16 MB and at most volume_max_mb (%d MB)", c.VolumeDefaultMB, c.VolumeMaxMB)
	case c.NodeMemoryMB < 0:
		return invalid("node_memory_mb", "must be 0 (derived from the host) or positive")
	case c.NodeDiskMB < 0:
		return invalid("node_disk_mb", "must be 0 (derived from the host) or positive")
	case c.NodeMaxSandboxes < 0:
		return invalid("node_max_sandboxes", "must be 0 (derived from the host) or positive")
	case c.MetricsToken != "" && len(c.MetricsToken) < 16:
		return invalid("metrics_token", "must be at least 16 characters")
	case c.PausedRetention < time.Hour:
		return invalid("paused_retention", "%s must be at least 1h", c.PausedRetention)
	case c.IdleFreeze != 0 && (c.IdleFreeze < time.Second || c.IdleFreeze > 24*time.Hour):
		return invalid("idle_freeze", "%s must be 0 (never) or between 1s and 24h", c.IdleFreeze)
	case c.IdleHibernate != 0 && (c.IdleHibernate < time.Second || c.IdleHibernate > 7*24*time.Hour):
		return invalid("idle_hibernate", "%s must be 0 (never) or between 1s and 168h", c.IdleHibernate)
	case !filepath.IsAbs(c.PlatformKeyFile):
		return invalid("platform_key_file", "%q must be an absolute path", c.PlatformKeyFile)
	}
	if bucket, ok := strings.CutPrefix(c.ObjectStore, "s3://"); ok {
		if bucket == "" || strings.Contains(bucket, "/") {
			return invalid("object_store", "%q: want s3://bucket", c.ObjectStore)
		}
		if c.S3AccessKey == "" || c.S3SecretKey == "" {
			return invalid("object_store", "%s needs s3_access_key and s3_secret_key (SPACE_S3_ACCESS_KEY, SPACE_S3_SECRET_KEY)", c.ObjectStore)
		}
	} else if !filepath.IsAbs(c.ObjectStore) {
		return invalid("object_store", "%q must be an absolute directory or s3://bucket", c.ObjectStore)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return invalid("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if _, err := os.Stat(c.RunscPath); err != nil {
		return invalid("runsc", "%v (run scripts/install-deps.sh)", err)
	}
	return nil
}

// invalid is the error of a setting that cannot work: its key and variable
// first, then what is wrong.
func invalid(key, format string, args ...any) error {
	s, _ := lookup(key)
	return fmt.Errorf("%s (%s): %s", key, s.Env(), fmt.Sprintf(format, args...))
}
