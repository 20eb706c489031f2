package e2bcompat

import (
	"encoding/json"
	"time"
)

// The JSON shapes of E2B's control-plane API, with the field names exactly
// as the SDKs send and parse them (api/e2b notes in docs/e2b.md).

// newSandbox is the body of POST /sandboxes and POST /v2/sandboxes (the v2
// form has no "secure": it is always secured).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      *networkConfig    `json:"network"`
	MCP          json.RawMessage   `json:"mcp"`
	IAM          *iamConfig        `json:"iam"`
	VolumeMounts []volumeMountJSON `json:"volumeMounts"`
}

type iamConfig struct {
	Tokens map[string]json.RawMessage `json:"tokens"`
}

// networkConfig is SandboxNetworkConfig (create) and, with
// allow_internet_access, SandboxNetworkUpdateConfig (PUT .../network).
type networkConfig struct {
	AllowPublicTraffic  *bool           `json:"allowPublicTraffic,omitempty"`
	AllowOut            []string        `json:"allowOut,omitempty"`
	DenyOut             []string        `json:"denyOut,omitempty"`
	DNSServers          []string        `json:"dnsServers,omitempty"`
	EgressProxy         json.RawMessage `json:"egressProxy,omitempty"`
	MaskRequestHost     *string         `json:"maskRequestHost,omitempty"`
	HTTPSPorts          []int           `json:"httpsPorts,omitempty"`
	Rules               json.RawMessage `json:"rules,omitempty"`
	AllowInternetAccess *bool           `json:"allow_internet_access,omitempty"`
}

// networkExtra is what of networkConfig has no field in the domain's
// NetworkPolicy; it is stored as sent and reported back. Only rules are
// stored now (the other fields are refused, 501); records stored before
// that may hold them and still report them.
type networkExtra struct {
	DNSServers      []string        `json:"dnsServers,omitempty"`
	EgressProxy     json.RawMessage `json:"egressProxy,omitempty"`
	MaskRequestHost *string         `json:"maskRequestHost,omitempty"`
	HTTPSPorts      []int           `json:"httpsPorts,omitempty"`
	Rules           json.RawMessage `json:"rules,omitempty"`
}

type timeoutRequest struct {
	Timeout *int `json:"timeout"`
}

type connectRequest struct {
	Timeout *int  `json:"timeout"`
	Memory  *bool `json:"memory"`
}

type pauseRequest struct {
	Memory              *bool `json:"memory"`
	RequireHealthyGuest *bool `json:"requireHealthyGuest"`
}

type resumeRequest struct {
	Timeout   *int  `json:"timeout"`
	AutoPause *bool `json:"autoPause"`
}

type forkRequest struct {
	Timeout *int `json:"timeout"`
	Count   *int `json:"count"`
}

// forkResultJSON is one entry of the fork answer: a sandbox or an error.
type forkResultJSON struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *errorJSON   `json:"error,omitempty"`
}

type refreshRequest struct {
	Duration *int `json:"duration"`
}

// sandboxJSON is the Sandbox schema: the answer to create and connect.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandboxJSON is ListedSandbox; sandboxDetailJSON adds to it.
type listedSandboxJSON struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []volumeMountJSON `json:"volumeMounts"`
}

type sandboxDetailJSON struct {
	listedSandboxJSON
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	AllowInternetAccess bool           `json:"allowInternetAccess"`
	Domain              *string        `json:"domain"`
	Network             *networkConfig `json:"network,omitempty"`
	Lifecycle           lifecycleJSON  `json:"lifecycle"`
	// PauseMode is what a paused sandbox's pause kept: "full" or
	// "filesystem" (omitted while running).
	PauseMode string `json:"pauseMode,omitempty"`
}

type lifecycleJSON struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// metricJSON is SandboxMetric.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// errorJSON is E2B's Error: code is always the HTTP status.
type errorJSON struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// Details: what errdefs.WithDetails gave (E2B's SDKs read only the
	// two fields above and ignore it).
	Details any `json:"details,omitempty"`
}
