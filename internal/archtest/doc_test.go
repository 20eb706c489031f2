package archtest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocMatchesRules reads docs/ARCHITECTURE.md's package list ("Packages
// and who may import whom": one bullet per package, "Imports a, b." or
// "Imports nothing.") and checks that it says what the layers table
// enforces, so the prose cannot drift from the rules.
func TestDocMatchesRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := docImports(t, string(doc))
	if len(documented) < 30 {
		t.Fatalf("read only %d packages from the doc: its format changed, or this parser is wrong", len(documented))
	}
	for _, l := range layers {
		if l.pkg == "test/..." {
			continue // the suites: _test.go files only, described as a group
		}
		got, ok := documented[l.pkg]
		if !ok {
			t.Errorf("docs/ARCHITECTURE.md has no line for %s", l.pkg)
			continue
		}
		want := slices.Clone(l.may)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("docs/ARCHITECTURE.md says %s imports %v; the rules allow %v", l.pkg, got, want)
		}
		delete(documented, l.pkg)
	}
	for pkg := range documented {
		t.Errorf("docs/ARCHITECTURE.md describes %s, which has no rule", pkg)
	}
}

// TestDocParserCanFail: the parser reads what a line says, so a wrong line
// would be caught.
func TestDocParserCanFail(t *testing.T) {
	doc := "## Packages and who may import whom\n\n" +
		"- `sandbox`: the domain (`commands.go`). Imports `errdefs`, `store` (records),\n  `api/...`.\n" +
		"- `cmd/space`: the CLI. Imports `client`. It also sees `store.Thing`.\n" +
		"- `agent/...` (`agent`, `agent/files`):\n  the agent. Imports `api/...`, `agent/...`.\n" +
		"- only `daemon` imports `httpapi`;\n" +
		"- `keylock`: locks. Imports nothing.\n\n## Next\n"
	got := docImports(t, doc)
	want := map[string][]string{
		"internal/sandbox":   {"api/...", "internal/errdefs", "internal/store"},
		"cmd/space":          {"client"},
		"internal/keylock":   nil,
		"internal/agent/...": {"api/...", "internal/agent/..."},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	for pkg, w := range want {
		if !slices.Equal(got[pkg], w) {
			t.Errorf("%s: parsed %v, want %v", pkg, got[pkg], w)
		}
	}
}

var (
	bulletName = regexp.MustCompile("^- `([^`]+)`")
	backticked = regexp.MustCompile("`([^`]+)`")
)

// docImports maps each package the section describes (module-relative, as
// in layers) to the sorted packages its line says it imports.
func docImports(t *testing.T, doc string) map[string][]string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "## Packages and who may import whom\n")
	if !ok {
		t.Fatal("no section \"Packages and who may import whom\"")
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	// One bullet per package: a line starting "- `name`:" and its
	// indented continuation lines.
	var bullets []string
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "- "):
			bullets = append(bullets, line)
		case strings.HasPrefix(line, "  ") && len(bullets) > 0:
			bullets[len(bullets)-1] += " " + strings.TrimSpace(line)
		default:
			bullets = append(bullets, "") // ends the bullet before it
		}
	}
	out := map[string][]string{}
	for _, b := range bullets {
		m := bulletName.FindStringSubmatch(b)
		if m == nil {
			continue
		}
		_, imports, ok := strings.Cut(b, " Imports ")
		if !ok {
			continue // a rule, not a package's line
		}
		// The list ends with its sentence; asides in parentheses say why.
		imports, _, _ = strings.Cut(dropParens(imports)+" ", ". ")
		var pkgs []string
		if !strings.HasPrefix(imports, "nothing") {
			for _, p := range backticked.FindAllStringSubmatch(imports, -1) {
				pkgs = append(pkgs, modulePath(p[1]))
			}
			slices.Sort(pkgs)
		}
		out[modulePath(m[1])] = pkgs
	}
	return out
}

// dropParens removes parenthesised asides (which name files and settings,
// not imports), nested ones included.
func dropParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// modulePath turns the doc's short names into module-relative paths:
// names are under internal/ unless they start with cmd/, api/, client or
// test/.
func modulePath(name string) string {
	for _, p := range []string{"cmd/", "api/", "client", "test/"} {
		if strings.HasPrefix(name, p) {
			return name
		}
	}
	return "internal/" + name
}
