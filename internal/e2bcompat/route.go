package e2bcompat

import (
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Headers E2B clients send to pick a sandbox and a port inside it.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	headerTraffic     = "E2b-Traffic-Access-Token"
)

// route is a request's target inside a sandbox.
type route struct {
	id   string
	port int // 0: the port header was not a port number
}

var (
	sandboxIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)
	hostLabel        = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{1,63})$`)
)

// sandboxRoute finds the sandbox a request is for: the E2b-Sandbox-Id header
// (E2b-Sandbox-Port, default 49983, picks the port), else a host name whose
// first label is <port>-<id> (E2B's get_host form).
func sandboxRoute(r *http.Request) (route, bool) {
	if id := r.Header.Get(headerSandboxID); id != "" {
		rt := route{id: id, port: EnvdPort}
		if p := r.Header.Get(headerSandboxPort); p != "" {
			rt.port = parsePort(p)
		}
		return rt, true
	}
	if r.Header.Get(headerSandboxPort) != "" {
		// A port without an ID: E2B's proxy refuses these too.
		return route{}, true
	}
	return hostRoute(r.Host)
}

func hostRoute(host string) (route, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, rest, ok := strings.Cut(strings.ToLower(host), ".")
	if !ok || rest == "" {
		return route{}, false
	}
	m := hostLabel.FindStringSubmatch(label)
	if m == nil {
		return route{}, false
	}
	return route{id: m[2], port: parsePort(m[1])}, true
}

func parsePort(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0
	}
	return n
}

// isSignedFileRequest: E2B's download_url and upload_url point at the
// sandbox URL's /files with a signature and no header naming the sandbox.
func isSignedFileRequest(r *http.Request) bool {
	return r.URL.Path == "/files" && r.URL.Query().Get("signature") != ""
}

// SandboxOf answers the sandbox an E2B request names: the sandbox proxy's
// header or host name, or the {id} of an API path under /sandboxes/ or
// /v2/sandboxes/; "" for none. A cluster node forwards by it.
func SandboxOf(r *http.Request) string {
	if rt, ok := sandboxRoute(r); ok {
		return rt.id
	}
	for _, prefix := range []string{"/sandboxes/", "/v2/sandboxes/"} {
		if rest, ok := strings.CutPrefix(r.URL.Path, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			if id != "metrics" && sandboxIDPattern.MatchString(id) {
				return id
			}
		}
	}
	return ""
}

// BuildOf answers the build whose status (with its log) r asks for (""
// for none): in a cluster it goes to the build's node.
func BuildOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.Path, "/templates/")
	if !ok || r.Method != http.MethodGet {
		return ""
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "builds" || parts[3] != "status" || parts[2] == "" || len(parts[2]) > 64 {
		return ""
	}
	return parts[2]
}

// IsCreate reports whether r creates a sandbox (a cluster places it).
func IsCreate(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/sandboxes" || r.URL.Path == "/v2/sandboxes")
}

// CreateTemplate answers the template an E2B create's body asks for
// ("base" when it names none or does not decode).
func CreateTemplate(body []byte) string {
	var req struct {
		TemplateID string `json:"templateID"`
	}
	if json.Unmarshal(body, &req) != nil || req.TemplateID == "" {
		return "base"
	}
	return strings.ToLower(req.TemplateID)
}
