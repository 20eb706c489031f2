package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The module's import rules, checked on the graph `go list` reports. Paths
// are relative to the module; "x/..." is x and every package below it.
// docs/ARCHITECTURE.md ("Packages and who may import whom") is the same
// table in prose: change both together (TestDocMatchesRules compares them).
//
// Only imports of this module's own packages are checked here. Which
// third-party packages the programs that run inside sandboxes may link is
// checked by TestSandboxBinaryDeps (sandbox_binaries_test.go).

const module = "github.com/spacesandbox/space"

// A layer is one row of the table: what a package's non-test code may
// import of this module. Every package has a row (the most specific
// pattern that matches it), so a new package must be given one.
type layer struct {
	pkg string
	may []string
}

var layers = []layer{
	// Entry points and wiring.
	{"cmd/spaced", []string{"internal/config", "internal/daemon"}},
	{"cmd/space", []string{"client", "internal/bench"}},
	{"cmd/space-agent", []string{"internal/agent"}},
	{"cmd/space-interpreter", []string{"internal/interpreter"}},
	{"cmd/space-desktop", []string{"internal/computeruse", "internal/desktopd"}},
	{"cmd/space-mcp-gateway", []string{"internal/mcpgateway"}},
	{"internal/daemon", []string{
		"internal/admission", "internal/blobstore", "internal/checkpoint", "internal/cluster", "internal/coderun", "internal/config", "internal/console", "internal/desktop", "internal/e2bcompat",
		"internal/egress", "internal/egress/dialer", "internal/egress/secrets", "internal/httpapi", "internal/network",
		"internal/ociimage", "internal/runtime", "internal/runtime/gvisor", "internal/sandbox",
		"internal/seal", "internal/store", "internal/template", "internal/tenant", "internal/volume", "internal/webhook",
	}},
	{"internal/config", []string{"internal/egress/policy", "internal/store"}},

	// The API layers.
	// httpapi implements the ServerInterface generated into api/native.
	{"internal/httpapi", []string{
		"api/native", "internal/bodylimit", "internal/cluster", "internal/coderun", "internal/computeruse", "internal/errdefs", "internal/httpjson", "internal/sandbox", "internal/template", "internal/store",
		"internal/recipe", "internal/recipe/dockerfile", "internal/ociimage", "internal/egress/secrets",
		"internal/tenant", "internal/volume", "internal/openapicheck",
	}},
	// The web console forwards to the public API's handler: it imports
	// nothing of the module, as a client of the API would, but the writer
	// of JSON answers.
	{"internal/console", []string{"internal/httpjson"}},
	{"internal/e2bcompat", []string{
		"internal/accesstoken", "internal/bodylimit", "internal/errdefs", "internal/httpjson", "internal/sandbox", "internal/template",
		"internal/recipe", "internal/ociimage", "internal/tenant", "internal/volume", "internal/webhook", "internal/e2bcompat/e2bapi", "internal/openapicheck",
	}},

	// Sandboxes and templates.
	{"internal/sandbox", []string{
		"api/...", "internal/admission", "internal/checkpoint", "internal/egress/policy", "internal/egress/secrets",
		"internal/errdefs", "internal/keylock", "internal/network", "internal/recipe",
		"internal/runtime", "internal/seal", "internal/store", "internal/tenant",
	}},
	// The node's budgets: what sandboxes take, measured through the
	// sandbox service's sampler; it knows no runtime.
	{"internal/admission", []string{"internal/errdefs"}},
	{"internal/template", []string{
		"internal/admission", "internal/checkpoint", "internal/errdefs", "internal/keylock", "internal/ociimage",
		"internal/recipe", "internal/rootfs", "internal/runtime", "internal/sandbox", "internal/store", "internal/tenant",
	}},
	// Volumes: sandboxes see them through sandbox.Volumes, so volume
	// knows no sandbox code (it reads the records' claims from the store).
	{"internal/volume", []string{"internal/checkpoint", "internal/errdefs", "internal/keylock", "internal/store", "internal/tenant"}},
	{"internal/tenant", []string{"internal/errdefs", "internal/store"}},
	// Lifecycle webhooks: events from the store's write log, deliveries
	// through the tenant dialer; no sandbox code.
	{"internal/webhook", []string{"internal/egress/dialer", "internal/errdefs", "internal/store", "internal/tenant"}},
	// Request body limits by route, for both API layers.
	{"internal/bodylimit", []string{"internal/errdefs"}},
	// spaced's client of the code interpreter inside a sandbox (its own:
	// internal/interpreter is linked into space-interpreter alone).
	{"internal/coderun", []string{"internal/accesstoken", "internal/errdefs", "internal/sandbox"}},
	// spaced's client of the computer-use server inside a desktop sandbox
	// (internal/desktopd is linked into space-desktop alone).
	{"internal/desktop", []string{"internal/accesstoken", "internal/computeruse", "internal/errdefs", "internal/sandbox"}},
	// The computer-use actions' wire, shared by both sides.
	{"internal/computeruse", nil},
	{"internal/recipe", []string{"internal/errdefs"}},
	{"internal/recipe/dockerfile", []string{"internal/errdefs", "internal/recipe"}},
	{"internal/ociimage", []string{"internal/egress/dialer", "internal/errdefs", "internal/recipe"}},
	{"internal/rootfs", []string{"internal/errdefs"}},

	// Machines, networks and the way out.
	{"internal/runtime", nil},
	{"internal/runtime/gvisor", []string{"internal/errdefs", "internal/runtime"}},
	{"internal/network", nil},
	{"internal/egress", []string{"internal/egress/dialer", "internal/egress/policy", "internal/egress/secrets"}},
	// Every connection made on a tenant's behalf.
	{"internal/egress/dialer", []string{"internal/egress/policy"}},
	{"internal/egress/policy", []string{"internal/store"}},
	{"internal/egress/secrets", []string{"internal/egress/policy"}},
	// Cluster membership and forwarding between nodes.
	{"internal/cluster", []string{"internal/bodylimit", "internal/errdefs", "internal/httpjson", "internal/store"}},
	// E2B's wire types, generated from E2B's spec (api/e2b/openapi.yml).
	{"internal/e2bcompat/e2bapi", nil},
	// The one writer of JSON answers and errors of the HTTP layers.
	{"internal/httpjson", []string{"internal/errdefs"}},
	// The request validator of both API layers (each gives its spec).
	{"internal/openapicheck", []string{"internal/errdefs"}},

	// Storage and small leaves.
	{"internal/checkpoint", []string{"internal/blobstore", "internal/errdefs", "internal/seal"}},
	{"internal/blobstore", []string{"internal/errdefs"}},
	{"internal/seal", []string{"internal/errdefs"}},
	{"internal/store", []string{"internal/errdefs"}},
	{"internal/keylock", nil},
	{"internal/errdefs", nil},
	// The interpreter's token, derived on both sides (spaced and
	// space-interpreter): standard library only.
	{"internal/accesstoken", nil},

	// Programs inside sandboxes.
	{"internal/agent/...", []string{"api/...", "internal/agent/..."}},
	{"internal/interpreter", []string{"internal/accesstoken", "internal/interpreter/jupyter"}},
	{"internal/interpreter/jupyter", nil},
	{"internal/desktopd", []string{"internal/accesstoken", "internal/computeruse"}},
	{"internal/mcpgateway", nil},

	// The public API and what speaks only it.
	{"api/...", []string{"api/..."}},
	// The client's wire types are generated from api/openapi.yaml into
	// client/apitypes, which is as public as the client.
	{"client", []string{"client/apitypes"}},
	{"client/apitypes", nil},
	{"internal/bench", []string{"client", "internal/cutproxy"}},
	// The cutting proxy of space bench --reconnects: standard library only.
	{"internal/cutproxy", nil},

	// Test-only packages.
	{"internal/testenv", nil},
	{"internal/archtest", nil},
	{"internal/blobstore/blobstoretest", []string{"internal/blobstore", "internal/errdefs", "internal/testenv"}},
	{"internal/store/storetest", []string{"internal/errdefs", "internal/store"}},
	{"internal/store/pgtest", []string{"internal/testenv"}},
	{"internal/runtime/runtimetest", []string{"internal/errdefs", "internal/runtime"}},
	// The in-memory runtime of the sandbox service's unit tests.
	{"internal/runtime/fakeruntime", []string{"internal/errdefs", "internal/runtime"}},
	{"internal/interpreter/interpretertest", []string{"internal/testenv"}},
	{"internal/ociimage/ocitest", nil},
	{"test/harness", []string{"client", "internal/egress", "internal/runtime/gvisor", "internal/testenv"}},
	{"test/...", nil}, // the suites are _test.go files only
}

// testOnly are the packages that exist for tests: helpers and suites.
var testOnly = []string{
	"internal/testenv", "internal/blobstore/blobstoretest", "internal/runtime/runtimetest", "internal/runtime/fakeruntime",
	"internal/interpreter/interpretertest", "internal/store/storetest", "internal/store/pgtest", "internal/ociimage/ocitest", "test/...",
}

// A restriction names the only packages that may import pkgs: in non-test
// code, and with tests also in _test.go files.
type restriction struct {
	rule  string
	pkgs  []string
	by    []string
	tests bool
}

var restrictions = []restriction{
	{rule: "only cmd/spaced runs the daemon", pkgs: []string{"internal/daemon"}, by: []string{"cmd/spaced"}, tests: true},
	{
		rule: "the API layers are wired by the daemon alone; nothing builds on them",
		pkgs: []string{"internal/httpapi", "internal/e2bcompat", "internal/console"}, by: []string{"internal/daemon"}, tests: true,
	},
	{
		rule: "the daemon's config goes no further than the daemon (and test/deploy, which checks that the manifests name its settings)",
		pkgs: []string{"internal/config"}, by: []string{"cmd/spaced", "internal/daemon", "test/deploy"}, tests: true,
	},
	{rule: "a command is imported by nothing", pkgs: []string{"cmd/..."}, tests: true},
	{
		rule: "only the daemon picks the runtime driver: above the runtime interface no code names runsc",
		pkgs: []string{"internal/runtime/gvisor"}, by: append([]string{"internal/daemon"}, testOnly...),
	},
	{
		rule: "only the daemon starts the egress gateway (others know egress/policy and egress/secrets)",
		pkgs: []string{"internal/egress"}, by: append([]string{"internal/daemon"}, testOnly...),
	},
	{
		rule: "only the sandbox service speaks the agent's protocol: the API layers call its domain methods",
		pkgs: []string{"api/agent/...", "api/envd/..."},
		by:   append([]string{"api/...", "internal/sandbox", "internal/agent/...", "cmd/space-agent"}, testOnly...),
	},
	{
		rule: "the agent is linked into space-agent alone",
		pkgs: []string{"internal/agent/..."}, by: []string{"cmd/space-agent", "internal/agent/..."}, tests: true,
	},
	{
		rule: "the code interpreter is linked into space-interpreter alone",
		pkgs: []string{"internal/interpreter/..."}, by: []string{"cmd/space-interpreter", "internal/interpreter/...", "test/..."}, tests: true,
	},
	{rule: "the benchmark is behind space bench", pkgs: []string{"internal/bench"}, by: append([]string{"cmd/space"}, testOnly...)},
	{rule: "test-only packages are imported by tests alone", pkgs: testOnly, by: testOnly},
	{rule: "nothing outside test/ imports test/..., not even a test", pkgs: []string{"test/..."}, by: []string{"test/..."}, tests: true},
}

// match reports whether pkg is pattern or, for "x/...", x or below it.
func match(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, pkg) })
}

// rowOf returns the most specific row matching pkg.
func rowOf(pkg string) (layer, bool) {
	var best layer
	found := false
	for _, l := range layers {
		if match(l.pkg, pkg) && (!found || len(l.pkg) > len(best.pkg)) {
			best, found = l, true
		}
	}
	return best, found
}

func (l layer) rule() string {
	if len(l.may) == 0 {
		return fmt.Sprintf("%s imports nothing of this module", l.pkg)
	}
	return fmt.Sprintf("%s imports only %s", l.pkg, strings.Join(l.may, ", "))
}

// pkg is one package of the module as `go list` reports it.
type pkg struct {
	ImportPath, Dir                    string
	Imports, TestImports, XTestImports []string
	GoFiles, TestGoFiles, XTestGoFiles []string
	Error                              *struct{ Err string }
}

// edge is one import between two packages of the module.
type edge struct {
	from, to string
	test     bool // only in _test.go files
}

func (e edge) String() string {
	if e.test {
		return e.from + " (in a test) imports " + e.to
	}
	return e.from + " imports " + e.to
}

// violations returns, for every edge that breaks a rule, the rules it
// breaks; packages without a row are reported under the edge {from: pkg}.
func violations(pkgs []string, edges []edge) map[edge][]string {
	out := map[edge][]string{}
	for _, p := range pkgs {
		if _, ok := rowOf(p); !ok {
			out[edge{from: p}] = []string{"every package has a row in layers (imports_test.go) and a line in docs/ARCHITECTURE.md"}
		}
	}
	for _, e := range edges {
		if e.from == e.to {
			continue // an external test package importing its own package
		}
		if row, ok := rowOf(e.from); ok && !e.test && !matchAny(row.may, e.to) {
			out[e] = append(out[e], row.rule())
		}
		for _, r := range restrictions {
			if (r.tests || !e.test) && matchAny(r.pkgs, e.to) && !matchAny(r.by, e.from) {
				out[e] = append(out[e], r.rule)
			}
		}
	}
	return out
}

// load lists the module's packages and their imports of each other.
var load = sync.OnceValues(func() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,Imports,TestImports,XTestImports,GoFiles,TestGoFiles,XTestGoFiles,Error", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list: %w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
})

func rel(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func graph(t *testing.T) ([]string, []edge, map[string]pkg) {
	t.Helper()
	list, err := load()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var edges []edge
	byName := map[string]pkg{}
	for _, p := range list {
		from, _ := rel(p.ImportPath)
		names = append(names, from)
		byName[from] = p
		add := func(imports []string, test bool) {
			for _, imp := range imports {
				if to, ok := rel(imp); ok {
					edges = append(edges, edge{from, to, test})
				}
			}
		}
		add(p.Imports, false)
		add(p.TestImports, true)
		add(p.XTestImports, true)
	}
	return names, edges, byName
}

// files names the files of p that hold the import of e, for the message.
func files(p pkg, e edge) []string {
	names := p.GoFiles
	if e.test {
		names = append(slices.Clone(p.TestGoFiles), p.XTestGoFiles...)
	}
	var out []string
	for _, name := range names {
		path := filepath.Join(p.Dir, name)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, imp := range f.Imports {
			if v, _ := strconv.Unquote(imp.Path.Value); v == module+"/"+e.to {
				out = append(out, filepath.Join(e.from, name))
			}
		}
	}
	return out
}

// TestImportRules checks the module as it is.
func TestImportRules(t *testing.T) {
	names, edges, byName := graph(t)
	found := violations(names, edges)
	for _, e := range slices.SortedFunc(maps.Keys(found), func(a, b edge) int { return strings.Compare(a.String(), b.String()) }) {
		if e.to == "" {
			t.Errorf("%s has no import rule: %s", e.from, found[e][0])
			continue
		}
		where := ""
		if fs := files(byName[e.from], e); len(fs) > 0 {
			where = " (" + strings.Join(fs, ", ") + ")"
		}
		t.Errorf("%s%s, which breaks:\n\t%s", e, where, strings.Join(found[e], "\n\t"))
	}
}

// TestRulesAreLive checks that every pattern the rules name still names a
// package, so that a rename cannot quietly empty a rule.
func TestRulesAreLive(t *testing.T) {
	names, _, _ := graph(t)
	live := func(where, pattern string) {
		if !slices.ContainsFunc(names, func(n string) bool { return match(pattern, n) }) {
			t.Errorf("%s names %s, which matches no package of the module", where, pattern)
		}
	}
	seen := map[string]bool{}
	for _, l := range layers {
		if seen[l.pkg] {
			t.Errorf("layers has two rows for %s", l.pkg)
		}
		seen[l.pkg] = true
		live("layers", l.pkg)
		for _, m := range l.may {
			live("the row of "+l.pkg, m)
		}
	}
	for _, r := range restrictions {
		for _, p := range append(slices.Clone(r.pkgs), r.by...) {
			live(fmt.Sprintf("rule %q", r.rule), p)
		}
	}
}

// TestRulesCanFail shows that every rule catches an import it forbids: the
// module's graph plus one made-up edge must break exactly the rule meant.
func TestRulesCanFail(t *testing.T) {
	names, edges, _ := graph(t)
	catches := func(t *testing.T, e edge, rule string) {
		t.Helper()
		got := violations(names, append(slices.Clone(edges), e))[e]
		if !slices.Contains(got, rule) {
			t.Errorf("%s was not caught by %q (caught by: %q)", e, rule, got)
		}
	}

	// The imports the architecture is most about, spelled out.
	for _, c := range []struct {
		e    edge
		rule string
	}{
		{edge{"internal/sandbox", "internal/httpapi", false}, "the API layers are wired by the daemon alone; nothing builds on them"},
		{edge{"internal/template", "internal/e2bcompat", true}, "the API layers are wired by the daemon alone; nothing builds on them"},
		{edge{"internal/store", "internal/daemon", false}, "only cmd/spaced runs the daemon"},
		{edge{"internal/recipe", "cmd/space", false}, "a command is imported by nothing"},
		{edge{"internal/sandbox", "internal/runtime/gvisor", false}, "only the daemon picks the runtime driver: above the runtime interface no code names runsc"},
		{edge{"internal/rootfs", "internal/testenv", false}, "test-only packages are imported by tests alone"},
		{edge{"internal/blobstore", "test/harness", true}, "nothing outside test/ imports test/..., not even a test"},
		{edge{"internal/interpreter", "internal/agent/users", false}, "the agent is linked into space-agent alone"},
		{edge{"internal/agent", "internal/errdefs", false}, rowRule("internal/agent")},
		{edge{"internal/httpapi", "api/agent/v1/agentv1connect", false}, rowRule("internal/httpapi")},
		{edge{"internal/httpapi", "api/envd/process", false}, "only the sandbox service speaks the agent's protocol: the API layers call its domain methods"},
		{edge{"internal/e2bcompat", "api/envd/filesystem", false}, "only the sandbox service speaks the agent's protocol: the API layers call its domain methods"},
		{edge{"internal/bench", "internal/store", false}, rowRule("internal/bench")},
		{edge{"client", "internal/errdefs", false}, rowRule("client")},
	} {
		t.Run(c.e.String(), func(t *testing.T) { catches(t, c.e, c.rule) })
	}

	// Every row: its first package importing the first package the row
	// does not allow.
	for _, l := range layers {
		t.Run("row "+l.pkg, func(t *testing.T) {
			from := ""
			for _, n := range names {
				if row, _ := rowOf(n); row.pkg == l.pkg {
					from = n
					break
				}
			}
			if from == "" {
				t.Fatalf("no package has the row %s", l.pkg)
			}
			for _, to := range names {
				if to != from && !matchAny(l.may, to) {
					catches(t, edge{from, to, false}, l.rule())
					return
				}
			}
			t.Fatalf("the row %s allows every package", l.pkg)
		})
	}

	// Every restriction: a package it does not allow importing the first
	// package it guards (in a test when the rule covers tests).
	for _, r := range restrictions {
		t.Run("rule "+r.rule, func(t *testing.T) {
			var from, to string
			for _, n := range names {
				if from == "" && !matchAny(r.by, n) {
					from = n
				}
				if to == "" && matchAny(r.pkgs, n) {
					to = n
				}
			}
			catches(t, edge{from, to, r.tests}, r.rule)
		})
	}

	// A package without a row.
	t.Run("no row", func(t *testing.T) {
		got := violations(append(slices.Clone(names), "internal/newpkg"), edges)
		if _, ok := got[edge{from: "internal/newpkg"}]; !ok {
			t.Error("a package without a row was not caught")
		}
	})
}

func rowRule(pkg string) string {
	row, _ := rowOf(pkg)
	return row.rule()
}
