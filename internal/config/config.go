// Package config is spaced's typed configuration: safe defaults that work
// with no file, overridden by SPACE_* environment variables, then by flags,
// and checked once by Validate before anything starts.
package config

import (
	"flag"
	"fmt"
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

	"github.com/spacesandbox/space/internal/egress/policy"
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

// Load builds the configuration from defaults, the environment (read with
// lookupEnv, os.LookupEnv in spaced) and args.
func Load(args []string, lookupEnv func(string) (string, bool)) (Config, error) {
	c := Default()
	if err := c.applyEnv(lookupEnv); err != nil {
		return c, err
	}
	fs := flag.NewFlagSet("spaced", flag.ContinueOnError)
	c.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
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
	return c, c.Validate()
}

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validateCluster checks the cluster settings (when a catalog is set).
func (c Config) validateCluster() error {
	if c.DatabaseURL == "" {
		return nil
	}
	if !nodeIDPattern.MatchString(c.NodeID) {
		return fmt.Errorf("node id %q must be 1-63 letters, digits, '.', '_' or '-'", c.NodeID)
	}
	u, err := url.Parse(c.NodeAddress)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
		return fmt.Errorf("node address %q must be an http(s) URL with a host and no path", c.NodeAddress)
	}
	if c.NodeLease < time.Second || c.NodeLease > 10*time.Minute {
		return fmt.Errorf("node lease %s must be between 1s and 10m", c.NodeLease)
	}
	return nil
}

func (c *Config) applyEnv(lookupEnv func(string) (string, bool)) error {
	getenv := func(k string) string { v, _ := lookupEnv(k); return v }
	str := map[string]*string{
		"SPACE_DATA_DIR":           &c.DataDir,
		"SPACE_ADDR":               &c.Addr,
		"SPACE_API_KEY":            &c.APIKey,
		"SPACE_METRICS_TOKEN":      &c.MetricsToken,
		"SPACE_TEMPLATES_DIR":      &c.TemplatesDir,
		"SPACE_RUNSC":              &c.RunscPath,
		"SPACE_LOG_LEVEL":          &c.LogLevel,
		"SPACE_DEBUG_ADDR":         &c.DebugAddr,
		"SPACE_OBJECT_STORE":       &c.ObjectStore,
		"SPACE_S3_ENDPOINT":        &c.S3Endpoint,
		"SPACE_S3_REGION":          &c.S3Region,
		"SPACE_S3_ACCESS_KEY":      &c.S3AccessKey,
		"SPACE_S3_SECRET_KEY":      &c.S3SecretKey,
		"SPACE_PLATFORM_KEY_FILE":  &c.PlatformKeyFile,
		"SPACE_CUSTOMER_KEYS_FILE": &c.CustomerKeysFile,
		"SPACE_EGRESS_DNS":         &c.EgressDNS,
		"SPACE_EGRESS_UPSTREAM_CA": &c.EgressUpstreamCA,
		"SPACE_AGENT_BINARY":       &c.AgentBinary,
		"SPACE_DATABASE_URL":       &c.DatabaseURL,
		"SPACE_NODE_ID":            &c.NodeID,
		"SPACE_NODE_ADDRESS":       &c.NodeAddress,
	}
	for k, p := range str {
		if v := getenv(k); v != "" {
			*p = v
		}
	}
	if v := getenv("SPACE_SANDBOX_CIDR"); v != "" {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return fmt.Errorf("SPACE_SANDBOX_CIDR: %w", err)
		}
		c.SandboxCIDR = p
	}
	for k, p := range map[string]*time.Duration{
		"SPACE_DEFAULT_TIMEOUT":        &c.DefaultTimeout,
		"SPACE_MAX_TIMEOUT":            &c.MaxTimeout,
		"SPACE_TEMPLATE_BUILD_TIMEOUT": &c.TemplateBuildTimeout,
		"SPACE_TEMPLATE_CACHE_TTL":     &c.TemplateCacheTTL,
		"SPACE_TEMPLATE_GC_INTERVAL":   &c.TemplateGCInterval,
		"SPACE_AUDIT_RETENTION":        &c.AuditRetention,
		"SPACE_METRICS_INTERVAL":       &c.MetricsInterval,
		"SPACE_NODE_LEASE":             &c.NodeLease,
	} {
		if v := getenv(k); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			*p = d
		}
	}
	for k, p := range map[string]*int{
		"SPACE_DEFAULT_CPU":            &c.DefaultCPU,
		"SPACE_DEFAULT_MEMORY_MB":      &c.DefaultMemoryMB,
		"SPACE_DEFAULT_DISK_MB":        &c.DefaultDiskMB,
		"SPACE_DEFAULT_MAX_PROCESSES":  &c.DefaultMaxProcesses,
		"SPACE_TEMPLATE_BUILDS":        &c.TemplateBuilds,
		"SPACE_VOLUME_DEFAULT_MB":      &c.VolumeDefaultMB,
		"SPACE_VOLUME_MAX_MB":          &c.VolumeMaxMB,
		"SPACE_TENANT_MAX_SANDBOXES":   &c.TenantQuotas.Sandboxes,
		"SPACE_TENANT_MAX_VCPU":        &c.TenantQuotas.VCPU,
		"SPACE_TENANT_MAX_MEMORY_MB":   &c.TenantQuotas.MemoryMB,
		"SPACE_TENANT_MAX_BUILDS":      &c.TenantQuotas.Builds,
		"SPACE_TENANT_MAX_PAUSED":      &c.TenantQuotas.PausedSandboxes,
		"SPACE_TENANT_MAX_PAUSED_MB":   &c.TenantQuotas.PausedMB,
		"SPACE_TENANT_MAX_SNAPSHOTS":   &c.TenantQuotas.Snapshots,
		"SPACE_TENANT_MAX_SNAPSHOT_MB": &c.TenantQuotas.SnapshotMB,
		"SPACE_TENANT_MAX_TEMPLATES":   &c.TenantQuotas.Templates,
		"SPACE_TENANT_MAX_TEMPLATE_MB": &c.TenantQuotas.TemplateMB,
		"SPACE_TENANT_CREATES_BURST":   &c.TenantQuotas.CreatesBurst,
		"SPACE_NODE_MEMORY_MB":         &c.NodeMemoryMB,
		"SPACE_NODE_DISK_MB":           &c.NodeDiskMB,
		"SPACE_NODE_MAX_SANDBOXES":     &c.NodeMaxSandboxes,
	} {
		if v := getenv(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s must be an integer", k)
			}
			*p = n
		}
	}
	for k, p := range map[string]*int64{"SPACE_TEMPLATE_MAX_UPLOAD": &c.TemplateMaxUpload, "SPACE_TEMPLATE_MAX_IMAGE": &c.TemplateMaxImage, "SPACE_TEMPLATE_MAX_CONTEXT": &c.TemplateMaxContext} {
		if v := getenv(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("%s must be a positive number of bytes", k)
			}
			*p = n
		}
	}
	if v := getenv("SPACE_REGISTRY_ALLOW"); v != "" {
		p, err := policy.ParsePrefixes(v)
		if err != nil {
			return fmt.Errorf("SPACE_REGISTRY_ALLOW: %w", err)
		}
		c.RegistryAllow = p
	}
	if v := getenv("SPACE_WEBHOOK_ALLOW"); v != "" {
		p, err := policy.ParsePrefixes(v)
		if err != nil {
			return fmt.Errorf("SPACE_WEBHOOK_ALLOW: %w", err)
		}
		c.WebhookAllow = p
	}
	if v := getenv("SPACE_WEBHOOK_QUEUE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("SPACE_WEBHOOK_QUEUE must be a positive number of deliveries")
		}
		c.WebhookQueue = n
	}
	if v := getenv("SPACE_WEBHOOK_RETRY_MAX"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("SPACE_WEBHOOK_RETRY_MAX must be a positive duration")
		}
		c.WebhookRetryMax = d
	}
	if v := getenv("SPACE_AGENT_BOOT_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("SPACE_AGENT_BOOT_TIMEOUT: %w", err)
		}
		c.AgentBootTimeout = d
	}
	if v, ok := lookupEnv("SPACE_POOL"); ok {
		p, err := ParsePools(v)
		if err != nil {
			return fmt.Errorf("SPACE_POOL: %w", err)
		}
		c.Pools = p
	}
	if v := getenv("SPACE_POOL_BOOTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("SPACE_POOL_BOOTS must be an integer from 1 to 64")
		}
		c.PoolBoots = n
	}
	if v := getenv("SPACE_MAX_BOOTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("SPACE_MAX_BOOTS must be an integer from 1 to 1024")
		}
		c.MaxBoots = n
	}
	if v := getenv("SPACE_TENANT_CREATES_PER_SECOND"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("SPACE_TENANT_CREATES_PER_SECOND must be a number >= 0")
		}
		c.TenantQuotas.CreatesPerSecond = f
	}
	if v := getenv("SPACE_PAUSED_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("SPACE_PAUSED_RETENTION: %w", err)
		}
		c.PausedRetention = d
	}
	if v := getenv("SPACE_EGRESS_FLOOR"); v != "" {
		p, err := policy.ParsePrefixes(v)
		if err != nil {
			return fmt.Errorf("SPACE_EGRESS_FLOOR: %w", err)
		}
		c.EgressFloor = p
	}
	if v := getenv("SPACE_RUNSC_DEBUG"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("SPACE_RUNSC_DEBUG: %w", err)
		}
		c.RunscDebug = b
	}
	return nil
}

func (c *Config) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "state directory (SPACE_DATA_DIR)")
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address of the API (SPACE_ADDR)")
	fs.StringVar(&c.TemplatesDir, "templates-dir", c.TemplatesDir, "built templates (SPACE_TEMPLATES_DIR; default <data-dir>/templates)")
	fs.StringVar(&c.RunscPath, "runsc", c.RunscPath, "runsc binary (SPACE_RUNSC)")
	fs.Func("sandbox-cidr", "address range for sandbox veth pairs (SPACE_SANDBOX_CIDR)", func(s string) error {
		p, err := netip.ParsePrefix(s)
		c.SandboxCIDR = p
		return err
	})
	fs.DurationVar(&c.DefaultTimeout, "default-timeout", c.DefaultTimeout, "sandbox lifetime when a request names none")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (SPACE_LOG_LEVEL)")
	fs.Func("pool", `warm pools, "base=2:8,code-interpreter-v1=1:4" (SPACE_POOL; "" turns pooling off)`, func(v string) error {
		p, err := ParsePools(v)
		c.Pools = p
		return err
	})
	fs.StringVar(&c.DebugAddr, "debug-addr", c.DebugAddr, "serve net/http/pprof on this address (SPACE_DEBUG_ADDR; off when empty)")
	fs.BoolVar(&c.RunscDebug, "runsc-debug", c.RunscDebug, "write runsc debug logs per sandbox")
	fs.StringVar(&c.ObjectStore, "object-store", c.ObjectStore, `checkpoints and snapshots: a directory or "s3://bucket" (SPACE_OBJECT_STORE; default <data-dir>/objects)`)
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if err := c.validateCluster(); err != nil {
		return err
	}
	switch {
	case !filepath.IsAbs(c.DataDir):
		return fmt.Errorf("data dir %q must be an absolute path", c.DataDir)
	case !filepath.IsAbs(c.TemplatesDir):
		return fmt.Errorf("templates dir %q must be an absolute path", c.TemplatesDir)
	case c.Addr == "":
		return fmt.Errorf("listen address is empty")
	case !c.SandboxCIDR.Addr().Is4() || c.SandboxCIDR.Bits() > 28:
		return fmt.Errorf("sandbox CIDR %s must be IPv4 and at least a /28", c.SandboxCIDR)
	case c.DefaultTimeout <= 0 || c.DefaultTimeout > c.MaxTimeout:
		return fmt.Errorf("default timeout %s must be in (0, %s]", c.DefaultTimeout, c.MaxTimeout)
	case c.AgentBootTimeout <= 0:
		return fmt.Errorf("agent boot timeout must be positive")
	case c.MaxBoots < 1:
		return fmt.Errorf("max boots must be at least 1")
	case c.DefaultCPU < 1 || c.DefaultMemoryMB < 64 || c.DefaultDiskMB < 16 || c.DefaultMaxProcesses < 16:
		return fmt.Errorf("default limits are too small (cpu >= 1, memory >= 64 MB, disk >= 16 MB, processes >= 16)")
	case c.DefaultCPU > 64 || c.DefaultMemoryMB > 65536 || c.DefaultDiskMB > 1<<20 || c.DefaultMaxProcesses > 65536:
		return fmt.Errorf("default limits are too large (cpu <= 64, memory <= 65536 MB, disk <= 1048576 MB, processes <= 65536)")
	case c.MaxTimeout < time.Second || c.MaxTimeout > 30*24*time.Hour:
		return fmt.Errorf("max timeout %s must be between 1s and 720h", c.MaxTimeout)
	case c.TemplateBuilds < 1 || c.TemplateBuilds > 64:
		return fmt.Errorf("template builds at once must be between 1 and 64")
	case c.TemplateBuildTimeout < time.Second:
		return fmt.Errorf("template build timeout %s must be at least 1s", c.TemplateBuildTimeout)
	case c.TemplateCacheTTL < time.Second || c.TemplateGCInterval < time.Second:
		return fmt.Errorf("template cache TTL and collection interval must be at least 1s")
	case c.MetricsInterval < 100*time.Millisecond || c.MetricsInterval > time.Minute:
		return fmt.Errorf("metrics interval %s must be between 100ms and 1m", c.MetricsInterval)
	case c.VolumeMaxMB < 16 || c.VolumeDefaultMB < 16 || c.VolumeDefaultMB > c.VolumeMaxMB:
		return fmt.Errorf("volume sizes: the default (%d MB) and the maximum (%d MB) must be at least 16 MB, the default at most the maximum", c.VolumeDefaultMB, c.VolumeMaxMB)
	case c.NodeMemoryMB < 0 || c.NodeDiskMB < 0 || c.NodeMaxSandboxes < 0:
		return fmt.Errorf("node budgets (SPACE_NODE_MEMORY_MB, SPACE_NODE_DISK_MB, SPACE_NODE_MAX_SANDBOXES) must be 0 (derived from the host) or positive")
	case c.MetricsToken != "" && len(c.MetricsToken) < 16:
		return fmt.Errorf("SPACE_METRICS_TOKEN must be at least 16 characters")
	case c.PausedRetention < time.Hour:
		return fmt.Errorf("paused retention %s must be at least 1h", c.PausedRetention)
	case !filepath.IsAbs(c.PlatformKeyFile):
		return fmt.Errorf("platform key file %q must be an absolute path", c.PlatformKeyFile)
	}
	if bucket, ok := strings.CutPrefix(c.ObjectStore, "s3://"); ok {
		if bucket == "" || strings.Contains(bucket, "/") {
			return fmt.Errorf("object store %q: want s3://bucket", c.ObjectStore)
		}
		if c.S3AccessKey == "" || c.S3SecretKey == "" {
			return fmt.Errorf("object store %s needs SPACE_S3_ACCESS_KEY and SPACE_S3_SECRET_KEY", c.ObjectStore)
		}
	} else if !filepath.IsAbs(c.ObjectStore) {
		return fmt.Errorf("object store %q must be an absolute directory or s3://bucket", c.ObjectStore)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log level %q is not one of debug, info, warn, error", c.LogLevel)
	}
	if _, err := os.Stat(c.RunscPath); err != nil {
		return fmt.Errorf("runsc binary: %w (run scripts/install-deps.sh)", err)
	}
	return nil
}
