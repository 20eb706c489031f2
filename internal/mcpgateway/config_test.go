package mcpgateway

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cat := NewCatalog("/r")
	for _, tc := range []struct {
		name, config string
		want         []Server
		err          string
	}{
		{"time", `{"time":{}}`, []Server{{Name: "time", Command: "/r/venv/bin/mcp-server-time"}}, ""},
		{"settings null", `{"time":null}`, []Server{{Name: "time", Command: "/r/venv/bin/mcp-server-time"}}, ""},
		{"filesystem", `{"filesystem":{"paths":["/home/user","/tmp"]}}`, []Server{{Name: "filesystem", Command: "node",
			Args: []string{"/r/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/home/user", "/tmp"}}}, ""},
		{"filesystem without paths", `{"filesystem":{}}`, nil, `MCP server "filesystem": paths is required`},
		{"filesystem paths not strings", `{"filesystem":{"paths":[1]}}`, nil, "paths must be a non-empty list of strings"},
		{"sorted by name", `{"time":{},"sequentialthinking":{}}`, []Server{
			{Name: "sequentialthinking", Command: "node", Args: []string{"/r/node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"}},
			{Name: "time", Command: "/r/venv/bin/mcp-server-time"}}, ""},
		{"github, JS spelling", `{"github/acme/tools":{"runCmd":"python3 server.py","installCmd":"pip install -r r.txt","envs":{"B":"2","A":"1"}}}`, []Server{{
			Name: "github/acme/tools", Command: "sh", Args: []string{"-c", "python3 server.py"}, Dir: "/opt/mcp-gateway/github/acme/tools",
			Repo: "https://github.com/acme/tools", Install: "pip install -r r.txt", Env: []string{"A=1", "B=2"}}}, ""},
		{"github, Python spelling", `{"github/acme/tools":{"run_cmd":"./serve","install_cmd":"make"}}`, []Server{{
			Name: "github/acme/tools", Command: "sh", Args: []string{"-c", "./serve"}, Dir: "/opt/mcp-gateway/github/acme/tools",
			Repo: "https://github.com/acme/tools", Install: "make"}}, ""},
		{"git, one repository", `{"git":{"paths":["/home/user/repo"]}}`, []Server{{Name: "git", Command: "/r/venv/bin/mcp-server-git", Args: []string{"--repository", "/home/user/repo"}}}, ""},
		{"git, several", `{"git":{"paths":["/a","/b"]}}`, []Server{{Name: "git", Command: "/r/venv/bin/mcp-server-git"}}, ""},
		{"github without runCmd", `{"github/acme/tools":{}}`, nil, "runCmd is required"},
		{"github env with =", `{"github/acme/tools":{"runCmd":"x","envs":{"A=B":"1"}}}`, nil, `envs["A=B"]`},
		{"github path escape", `{"github/../etc":{"runCmd":"x"}}`, nil, `unknown MCP server "github/../etc"`},
		{"github deeper path", `{"github/a/b/c":{"runCmd":"x"}}`, nil, `unknown MCP server "github/a/b/c"`},
		{"unknown", `{"invalid_server":{}}`, nil, `unknown MCP server "invalid_server": this gateway runs filesystem, git, memory, sequentialthinking, time`},
		{"not an object", `[1]`, nil, "must be a JSON object"},
		{"null", `null`, nil, "must be a JSON object"},
		{"empty", `{}`, nil, "names no server"},
		{"settings not an object", `{"time":"x"}`, nil, `MCP server "time": its settings must be a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.config), cat)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, equalServer) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func equalServer(a, b Server) bool {
	return a.Name == b.Name && a.Command == b.Command && slices.Equal(a.Args, b.Args) && slices.Equal(a.Env, b.Env) &&
		a.Dir == b.Dir && a.Repo == b.Repo && a.Install == b.Install
}
