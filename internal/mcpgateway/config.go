// Package mcpgateway is E2B's MCP gateway inside a sandbox: it launches the
// MCP servers a sandbox's `mcp` config names as stdio processes, and serves
// their tools as one MCP server (streamable HTTP at /mcp on port 50005),
// guarded by a bearer token. The E2B SDKs start it themselves after create,
// with `mcp-gateway --config '<json>'` as root and the token in
// GATEWAY_ACCESS_TOKEN, and read the token back from /etc/mcp-gateway/.token.
package mcpgateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Server is one MCP server to launch: a stdio process.
type Server struct {
	// Name is the key of the config ("time", "github/owner/repo").
	Name    string
	Command string
	Args    []string
	// Env is added to the gateway's environment (KEY=VALUE).
	Env []string
	// Dir is the working directory ("" is the gateway's).
	Dir string
	// Repo, when set, is cloned into Dir if Dir does not exist yet, and
	// Install (a shell command) is then run in Dir.
	Repo    string
	Install string
}

// Catalog maps the names E2B's config uses to the servers this sandbox has
// installed. Each entry makes a Server from that name's settings.
type Catalog map[string]func(settings map[string]any) (Server, error)

// DefaultRoot is where the mcp-gateway template installs the catalog's
// servers (a Python venv and an npm prefix).
const DefaultRoot = "/opt/space/mcp"

// NewCatalog is the catalog of the servers the mcp-gateway template ships
// under root: those of E2B's catalog (Docker's MCP catalog) that come from
// PyPI or npm and need no network. Their settings are E2B's (the SDK's
// McpServer type).
func NewCatalog(root string) Catalog {
	py := func(bin string, args ...string) Server {
		return Server{Command: path.Join(root, "venv", "bin", bin), Args: args}
	}
	node := func(pkg string, args ...string) Server {
		return Server{Command: "node", Args: append([]string{path.Join(root, "node_modules", pkg)}, args...)}
	}
	return Catalog{
		"time": func(map[string]any) (Server, error) { return py("mcp-server-time"), nil },
		"filesystem": func(s map[string]any) (Server, error) {
			paths, err := stringList(s, "paths", true)
			if err != nil {
				return Server{}, err
			}
			return node("@modelcontextprotocol/server-filesystem/dist/index.js", paths...), nil
		},
		"git": func(s map[string]any) (Server, error) {
			// Every tool takes the repository's path; one path is the
			// server's default repository.
			paths, err := stringList(s, "paths", true)
			if err != nil {
				return Server{}, err
			}
			if len(paths) == 1 {
				return py("mcp-server-git", "--repository", paths[0]), nil
			}
			return py("mcp-server-git"), nil
		},
		"memory": func(map[string]any) (Server, error) {
			srv := node("@modelcontextprotocol/server-memory/dist/index.js")
			srv.Env = []string{"MEMORY_FILE_PATH=/var/lib/mcp-gateway/memory.jsonl"}
			return srv, nil
		},
		"sequentialthinking": func(map[string]any) (Server, error) {
			return node("@modelcontextprotocol/server-sequential-thinking/dist/index.js"), nil
		},
	}
}

// githubName is a "github/<owner>/<repo>" key: names GitHub allows.
var githubName = regexp.MustCompile(`^github/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)$`)

// GitHubDir is where github/<owner>/<repo> servers are cloned.
const GitHubDir = "/opt/mcp-gateway/github"

// Parse reads the SDK's config (a JSON object: server name to settings)
// into the servers to launch, sorted by name. Names come from cat, or are
// "github/<owner>/<repo>" with runCmd (run_cmd), installCmd (install_cmd)
// and envs, as E2B's SDKs type them.
func Parse(raw []byte, cat Catalog) ([]Server, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg == nil {
		return nil, fmt.Errorf("the MCP config must be a JSON object of server names to settings")
	}
	if len(cfg) == 0 {
		return nil, fmt.Errorf("the MCP config names no server")
	}
	var out []Server
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		var settings map[string]any
		if err := json.Unmarshal(cfg[name], &settings); err != nil {
			return nil, fmt.Errorf("MCP server %q: its settings must be a JSON object", name)
		}
		if settings == nil {
			settings = map[string]any{}
		}
		var (
			srv Server
			err error
		)
		if m := githubName.FindStringSubmatch(name); m != nil && m[1] != "." && m[1] != ".." && m[2] != "." && m[2] != ".." {
			srv, err = githubServer(m[1], m[2], settings)
		} else if build, ok := cat[name]; ok {
			srv, err = build(settings)
		} else {
			return nil, fmt.Errorf("unknown MCP server %q: this gateway runs %s, and github/<owner>/<repo> with runCmd", name, strings.Join(slices.Sorted(maps.Keys(cat)), ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("MCP server %q: %w", name, err)
		}
		srv.Name = name
		out = append(out, srv)
	}
	return out, nil
}

func githubServer(owner, repo string, s map[string]any) (Server, error) {
	run, err := oneString(s, "runCmd", "run_cmd", true)
	if err != nil {
		return Server{}, err
	}
	install, err := oneString(s, "installCmd", "install_cmd", false)
	if err != nil {
		return Server{}, err
	}
	srv := Server{
		Command: "sh", Args: []string{"-c", run},
		Dir:     path.Join(GitHubDir, owner, repo),
		Repo:    "https://github.com/" + owner + "/" + repo,
		Install: install,
	}
	if envs, ok := s["envs"]; ok && envs != nil {
		m, ok := envs.(map[string]any)
		if !ok {
			return Server{}, fmt.Errorf("envs must be an object of strings")
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v, ok := m[k].(string)
			if !ok || k == "" || strings.ContainsAny(k, "=\x00") {
				return Server{}, fmt.Errorf("envs[%q] must be a string named without '='", k)
			}
			srv.Env = append(srv.Env, k+"="+v)
		}
	}
	return srv, nil
}

// oneString reads a string setting spelled either way (the JS SDK's
// camelCase, the Python SDK's snake_case).
func oneString(s map[string]any, camel, snake string, required bool) (string, error) {
	v, ok := s[camel]
	if !ok {
		v, ok = s[snake]
	}
	if !ok || v == nil {
		if required {
			return "", fmt.Errorf("%s is required", camel)
		}
		return "", nil
	}
	str, ok := v.(string)
	if !ok || (required && strings.TrimSpace(str) == "") {
		return "", fmt.Errorf("%s must be a non-empty string", camel)
	}
	return str, nil
}

func stringList(s map[string]any, key string, required bool) ([]string, error) {
	v, ok := s[key]
	if !ok || v == nil {
		if required {
			return nil, fmt.Errorf("%s is required", key)
		}
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok || (required && len(list) == 0) {
		return nil, fmt.Errorf("%s must be a non-empty list of strings", key)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		str, ok := e.(string)
		if !ok || str == "" {
			return nil, fmt.Errorf("%s must be a non-empty list of strings", key)
		}
		out = append(out, str)
	}
	return out, nil
}
