package redteam

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
)

// allAttempts is every attempt of the suite, in the order of the doc.
func allAttempts(t testing.TB) []attempt {
	tag := func(cat string, as []attempt) []attempt {
		for i := range as {
			if as[i].category == "" {
				as[i].category = cat
			}
		}
		return as
	}
	var out []attempt
	out = append(out, tag("filesystem", fsAttempts())...)
	out = append(out, tag("filesystem", fsUserAttempts())...)
	out = append(out, tag("filesystem", fileAPIAttempts(nil))...)
	out = append(out, tag("filesystem", volumeAttempts(nil))...)
	out = append(out, tag("kernel", kernelAttempts())...)
	out = append(out, tag("kernel", kernelUserAttempts())...)
	out = append(out, tag("kernel", agentHarmAttempts())...)
	out = append(out, tag("resources", resourceAttempts())...)
	out = append(out, tag("resources", uploadAttempts())...)
	out = append(out, tag("resources", outputAttempts())...)
	out = append(out, tag("control-plane", tokenAttempts(nil))...)
	out = append(out, tag("control-plane", desktopPortAttempts(nil))...)
	out = append(out, tag("control-plane", keyAttempts(t, nil))...)
	out = append(out, tag("control-plane", volumeTokenAttempts(nil))...)
	out = append(out, tag("control-plane", tenantAttempts(t, nil))...)
	out = append(out, tag("control-plane", abuseAttempts(func() *client.Sandbox { return nil }))...)
	out = append(out, tag("network", networkAttempts())...)
	out = append(out, tag("build", buildQuotaAttempts())...)
	out = append(out, tag("build", buildAttempts())...)
	out = append(out, tag("build", imageLinkAttempts())...)
	out = append(out, tag("build", dialAttempts())...)
	return out
}

// families says what each family of attempts tries as a whole: one
// mechanism, tried against several targets.
var families = map[string]string{
	"upload-declared":        "a request body declared far over its route's limit, sent without waiting for the answer",
	"upload-undeclared":      "a request body over its route's limit whose length the headers do not tell (chunked, or more than declared)",
	"cp-desktop-ports":       "a desktop's noVNC, DevTools and computer-use ports through spaced's port routing without the sandbox's own token",
	"fs-mount-table":         "read the mount tables for host paths",
	"fs-proc-kernel-files":   "read host kernel state through /proc files",
	"fs-proc-sys-write":      "change kernel settings through /proc and /sys files",
	"fs-dev-open":            "open host devices by their usual names",
	"fs-mknod":               "make a device node for a host device and open it",
	"fs-mount-root":          "mount file systems as root without CAP_SYS_ADMIN",
	"fs-chroot":              "the fchdir-and-climb chroot escape",
	"fs-handles":             "file handles (open_by_handle_at and name_to_handle_at)",
	"fs-trav-native":         "path traversal through each route of the native files API",
	"fs-trav-envd":           "path traversal through each route of envd's files API (E2B)",
	"fs-symlink-api":         "follow a symlink made inside out of the sandbox through the files APIs, one link target each",
	"fs-volume":              "reach host paths through a volume: what a sandbox plants in it, the volume content APIs, its mount path",
	"kernel-ptrace":          "ptrace a process that is not the caller's",
	"kernel-process-vm":      "read or write the agent's memory with process_vm_readv/writev",
	"kernel-io-uring":        "set up io_uring",
	"kernel-bpf":             "load eBPF",
	"kernel-modules":         "load or unload kernel modules",
	"kernel-set-clock":       "set the clock",
	"kernel-raw-sockets":     "open raw and packet sockets",
	"kernel-socket-families": "open sockets of families the sentry does not have",
	"kernel-signal-agent":    "as root, send the agent (PID 1) a signal, one signal each",
	"net-host-tcp":           "TCP from the sandbox to the host",
	"net-neighbour":          "TCP from the sandbox to other sandboxes",
	"net-namespace-tcp":      "TCP to addresses behind the host (metadata, CGNAT, the internet stand-in)",
	"net-udp":                "UDP out of the sandbox",
	"cp-cross-token":         "one sandbox's access token on another sandbox's envd routes, one route each",
	"cp-forged-token":        "forged access tokens, one spelling each",
	"cp-signed-url":          "tampered signed /files URLs, one tampering each",
	"cp-nokey":               "the native API without a valid API key, one route each",
	"cp-badid":               "the native API with bad or foreign sandbox ids, one route each",
	"cp-e2b-nokey":           "the E2B control-plane API without a valid API key, one route each",
	"cp-tenant":              "another tenant's objects through the native and E2B APIs with a valid key of one's own tenant, one route each",
	"cp-tenant-create":       "creates whose bodies name another tenant's template, snapshot, volume, secret, customer key or backup, one each",
	"cp-tenant-list":         "another tenant's objects in the lists of the native and E2B APIs, one list each",
	"cp-oversized-head":      "request heads beyond the server's header limit",
	"cp-oversized-body":      "request bodies beyond the JSON body limits",
	"cp-slow-clients":        "slow and idle connections held open",
	"cp-sse-unread":          "event streams that are never read",
	"build-quota":            "start more template builds (each step in a build sandbox) than the tenant's quotas allow, in one burst",
	"build-net-host":         "a template build's step reaches the host",
	"build-image-links":      "a build step links an image directory that host code writes into (/usr/local/bin gets the agent, an empty /tmp a marker) out of the image to a host directory, once one that exists and once one that does not, so that the build's end or the host's files would show the host being resolved",
	"interp-output-flood":    "one huge print, or many writes no flush separates, in a code-interpreter cell of each language",
	"build-pull-host":        "make spaced itself connect to the host's own addresses: a template's source image in a registry at each of them, through each build route",
}

// closedBy names, per mechanism, the commit that closed a hole an attack
// found open (issue 27), so the table says where each was fixed.
var closedBy = map[string]string{
	"build-pull-host":          "0c3f013",
	"build-image-links":        "2d3f4f1",
	"build-quota":              "bd5052c",
	"upload-declared":          "b014be0",
	"upload-undeclared":        "b014be0",
	"upload-context-bomb":      "f47583e",
	"interp-output-flood":      "49c9389 (Python) and a2acdd2 (JavaScript, TypeScript, bash)",
	"interp-flood-python-json": "bc0b585",
}

const (
	docPath    = "../../docs/security.md"
	tableBegin = "<!-- redteam attempts: generated by `REDTEAM_WRITE_DOC=1 go test -run TestSecurityDoc ./test/redteam/` -->"
	tableEnd   = "<!-- end of redteam attempts -->"
)

// counts are the figures of one category (or of all).
type counts struct{ attempts, mechanisms, controlled int }

func tally(as []attempt) (map[string]*counts, []string, counts) {
	per := map[string]*counts{}
	var cats []string
	var total counts
	seenMech := map[string]bool{}
	for _, a := range as {
		c := per[a.category]
		if c == nil {
			c = &counts{}
			per[a.category] = c
			cats = append(cats, a.category)
		}
		c.attempts++
		total.attempts++
		if a.control != "" {
			c.controlled++
			total.controlled++
		}
		if !seenMech[a.mechanism()] {
			seenMech[a.mechanism()] = true
			c.mechanisms++
			total.mechanisms++
		}
	}
	return per, cats, total
}

// attemptTable renders the attempts as the Markdown of the doc: the
// figures, then per category one row per mechanism.
func attemptTable(as []attempt) string {
	var b strings.Builder
	per, cats, total := tally(as)
	fmt.Fprintf(&b, "%d attempts, %d distinct mechanisms, %d of the attempts with a positive control.\n\n", total.attempts, total.mechanisms, total.controlled)
	b.WriteString("| category | attempts | distinct mechanisms | attempts with a positive control |\n| --- | --- | --- | --- |\n")
	for _, c := range cats {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", c, per[c].attempts, per[c].mechanisms, per[c].controlled)
	}
	esc := strings.NewReplacer("|", `\|`, "\n", " ")
	byMech := map[string][]attempt{}
	for _, a := range as {
		byMech[a.mechanism()] = append(byMech[a.mechanism()], a)
	}
	cur := ""
	done := map[string]bool{}
	for _, a := range as {
		m := a.mechanism()
		if done[m] {
			continue
		}
		done[m] = true
		if a.category != cur {
			cur = a.category
			fmt.Fprintf(&b, "\n### %s\n\n| mechanism | attempts | what it tries | what stops it | positive control |\n| --- | --- | --- | --- | --- |\n", cur)
		}
		members := byMech[m]
		if c := closedBy[m]; c != "" {
			for i := range members {
				members[i].stops += " (a hole an attack found open, closed in " + c + ")"
			}
			a = members[0]
		}
		if len(members) == 1 && a.family == "" {
			fmt.Fprintf(&b, "| `%s` | 1 | %s | %s | %s |\n", a.id, esc.Replace(a.desc), esc.Replace(a.stops), esc.Replace(orDash(a.control)))
			continue
		}
		var ids, stops, ctl []string
		sameStops, sameCtl := true, true
		for _, x := range members {
			ids = append(ids, "`"+x.id+"`")
			sameStops = sameStops && x.stops == members[0].stops
			sameCtl = sameCtl && x.control == members[0].control
		}
		for _, x := range members {
			if sameStops {
				stops = []string{x.stops}
			} else {
				stops = append(stops, fmt.Sprintf("`%s`: %s", x.id, x.stops))
			}
			if sameCtl {
				ctl = []string{orDash(x.control)}
			} else if x.control != "" {
				ctl = append(ctl, fmt.Sprintf("`%s`: %s", x.id, x.control))
			}
		}
		if len(ctl) == 0 {
			ctl = []string{"-"}
		}
		tries := fmt.Sprintf("%s; for example %s. Attempts: %s", families[m], members[0].desc, strings.Join(ids, ", "))
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", m, len(members), esc.Replace(tries),
			esc.Replace(strings.Join(stops, "; ")), esc.Replace(strings.Join(ctl, "; ")))
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scriptFuncs are the top-level functions of the attempt scripts, as
// "module.function".
func scriptFuncs(t testing.TB) map[string]bool {
	out := map[string]bool{}
	def := regexp.MustCompile(`(?m)^def ([a-z0-9_]+)\(`)
	err := fs.WalkDir(scripts, "attempts", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, _ := scripts.ReadFile(p)
		mod := strings.TrimSuffix(filepath.Base(p), ".py")
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			out[mod+"."+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSecurityDoc checks that docs/security.md lists every attempt of the
// suite, as generated from the tables, and that the tables are sound. It
// needs neither root nor runsc.
func TestSecurityDoc(t *testing.T) {
	as := allAttempts(t)
	funcs := scriptFuncs(t)
	seen := map[string]bool{}
	for _, a := range as {
		switch {
		case seen[a.id]:
			t.Errorf("attempt id %s is used twice", a.id)
		case a.desc == "" || a.stops == "":
			t.Errorf("attempt %s lacks a description or what stops it", a.id)
		case (a.py == "") == (a.run == nil):
			t.Errorf("attempt %s must have exactly one of py and run", a.id)
		case a.py != "" && a.check == nil:
			t.Errorf("attempt %s has code but no check", a.id)
		case a.py != "" && !funcs[a.py]:
			t.Errorf("attempt %s names %s, which no script under attempts/ defines", a.id, a.py)
		case a.family != "" && families[a.family] == "":
			t.Errorf("attempt %s is of family %s, which families does not describe", a.id, a.family)
		}
		seen[a.id] = true
	}
	if len(as) < 150 {
		t.Errorf("the suite has %d attempts; the issue asks for at least 150", len(as))
	}
	table := attemptTable(as)
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers of the attempt table", docPath)
	}
	want := before + tableBegin + "\n\n" + table + "\n" + tableEnd + after
	if os.Getenv("REDTEAM_WRITE_DOC") != "" {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want != string(doc) {
		abs, _ := filepath.Abs(docPath)
		t.Errorf("the attempt table of %s is out of date: run REDTEAM_WRITE_DOC=1 go test -run TestSecurityDoc ./test/redteam/", abs)
	}
	for id := range seen {
		if !strings.Contains(string(doc), "`"+id+"`") {
			t.Errorf("%s does not list attempt %s", docPath, id)
		}
	}
}

// TestAttemptScripts compiles every script under attempts/ with the host's
// python3, and lints it with pyflakes where that is installed.
func TestAttemptScripts(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Skip(t, "python3 is not on PATH")
	}
	dir := t.TempDir()
	var files []string
	entries, _ := scripts.ReadDir("attempts")
	for _, e := range entries {
		b, _ := scripts.ReadFile("attempts/" + e.Name())
		p := filepath.Join(dir, e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	if out, err := exec.Command(py, append([]string{"-m", "py_compile"}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	if exec.Command(py, "-c", "import pyflakes").Run() != nil {
		t.Logf("pyflakes is not installed: the scripts were compiled, not linted")
		return
	}
	if out, err := exec.Command(py, append([]string{"-m", "pyflakes"}, files...)...).CombinedOutput(); err != nil {
		t.Errorf("pyflakes: %v\n%s", err, strings.ReplaceAll(string(out), dir+"/", "attempts/"))
	}
}
