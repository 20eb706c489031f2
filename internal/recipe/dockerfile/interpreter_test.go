package dockerfile

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/testenv"
)

// The code-interpreter template (templates/code-interpreter/Dockerfile)
// builds offline from a wheelhouse in its context or online from PyPI and
// the npm registry. Parsed as spaced parses it, its install step is then
// run here with stand-ins for python3, pip and curl that record their
// calls (no network, nothing installed), under each source.

const interpreterDockerfile = "../../../templates/code-interpreter/Dockerfile"

func parseInterpreter(t *testing.T, args map[string]string) *recipe.Recipe {
	t.Helper()
	f, err := os.Open(interpreterDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec, err := Parse(f, Options{Context: ctx, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func envOf(r *recipe.Run) map[string]string {
	m := map[string]string{}
	for _, e := range r.Env {
		m[e.Name] = e.Value
	}
	return m
}

func TestInterpreterTemplateSteps(t *testing.T) {
	rec := parseInterpreter(t, nil)
	var shape []string
	for _, s := range rec.Steps {
		switch {
		case s.User != "":
			shape = append(shape, "USER "+s.User)
		case s.Workdir != "":
			shape = append(shape, "WORKDIR "+s.Workdir)
		case s.Copy != nil:
			shape = append(shape, "COPY "+strings.Join(s.Copy.Src, " ")+" "+s.Copy.Dest)
		case s.Run != nil:
			shape = append(shape, "RUN")
		default:
			shape = append(shape, "?")
		}
	}
	// RUN: Debian's R, IRkernel and JDK; the wheels, Deno; each kernel's check.
	want := []string{"USER root", "RUN", "COPY wheels/ /opt/space/wheels/", "RUN", "RUN",
		"COPY space-interpreter /usr/local/bin/space-interpreter", "USER user", "WORKDIR /home/user"}
	if strings.Join(shape, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(shape, "\n"), strings.Join(want, "\n"))
	}
	if rec.Start == nil || !strings.Contains(rec.Start.Cmd, "space-interpreter") ||
		rec.Start.Ready.Cmd != "curl -sf http://localhost:49999/health" {
		t.Errorf("start %+v", rec.Start)
	}
	run := installStep(t, rec)
	if got := envOf(run)["INTERPRETER_SOURCE"]; got != "auto" {
		t.Errorf("INTERPRETER_SOURCE defaults to %q", got)
	}
	if got := envOf(installStep(t, parseInterpreter(t, map[string]string{"INTERPRETER_SOURCE": "pypi"})))["INTERPRETER_SOURCE"]; got != "pypi" {
		t.Errorf("--build-arg INTERPRETER_SOURCE=pypi gave %q", got)
	}

	// Deno's pins are scripts/fetch-wheels.sh's.
	script, err := os.ReadFile("../../../scripts/fetch-wheels.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"DENO_VERSION", "DENO_INTEGRITY_X64", "DENO_INTEGRITY_ARM64"} {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(script)
		if m == nil || envOf(run)[name] != string(m[1]) {
			t.Errorf("%s: the Dockerfile has %q, fetch-wheels.sh %q", name, envOf(run)[name], m)
		}
	}
}

func installStep(t *testing.T, rec *recipe.Recipe) *recipe.Run {
	t.Helper()
	for _, s := range rec.Steps {
		if s.Run != nil && strings.Contains(s.Run.Shell, "INTERPRETER_SOURCE") {
			return s.Run
		}
	}
	t.Fatal("no install step")
	return nil
}

// stubs are the stand-ins: each appends its argv to $STUB_LOG.
const (
	stubPython = `#!/bin/sh
echo "python3 $*" >> "$STUB_LOG"
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\necho "pip $*" >> "$STUB_LOG"\n' > "$3/bin/pip"
  printf '#!/bin/sh\necho "venv-python $*" >> "$STUB_LOG"\n' > "$3/bin/python"
  chmod +x "$3/bin/pip" "$3/bin/python"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
`
	stubCurl = `#!/bin/sh
echo "curl $*" >> "$STUB_LOG"
while [ $# -gt 1 ]; do [ "$1" = -o ] && cp "$STUB_TGZ" "$2"; shift; done
`
	fakeDeno = "#!/bin/sh\necho \"deno $*\" >> \"$STUB_LOG\"\n"
)

// denoTarball is an npm tarball holding package/deno, and its integrity.
func denoTarball(t *testing.T) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "package/deno", Mode: 0o755, Size: int64(len(fakeDeno))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(fakeDeno))
	tw.Close()
	gz.Close()
	sum := sha512.Sum512(buf.Bytes())
	return buf.Bytes(), "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

func TestInterpreterTemplateSources(t *testing.T) {
	testenv.NeedCommand(t, "python3") // the install step's integrity check
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	tgz, integrity := denoTarball(t)
	// The install step picks Deno's package and pin by the machine's
	// architecture (uname -m), here the test's.
	pkg, pin := map[string]string{"amd64": "linux-x64-glibc", "arm64": "linux-arm64-glibc"}[runtime.GOARCH],
		map[string]string{"amd64": "DENO_INTEGRITY_X64", "arm64": "DENO_INTEGRITY_ARM64"}[runtime.GOARCH]
	if pkg == "" {
		t.Skipf("no Deno package for %s", runtime.GOARCH)
	}
	npm := "https://registry.npmjs.org/@deno/" + pkg + "/-/" + pkg + "-2.9.6.tgz"
	for _, tc := range []struct {
		name       string
		source     string
		wheelhouse bool   // the context has wheels (and deno)
		integrity  string // the pin ("": the fake tarball's)
		want       []string
		fails      string
	}{
		{"auto with a wheelhouse", "auto", true, "", []string{
			"pip install --no-cache-dir --no-index --find-links {root}/opt/space/wheels -r {root}/opt/space/wheels/requirements.txt",
		}, ""},
		{"auto without one", "auto", false, "", []string{
			"pip install --no-cache-dir --only-binary=:all: -r {root}/opt/space/wheels/requirements.txt",
			"curl -fsSL -o {tmp}/deno.tgz " + npm,
		}, ""},
		{"pypi despite a wheelhouse", "pypi", true, "", []string{
			"pip install --no-cache-dir --only-binary=:all: -r {root}/opt/space/wheels/requirements.txt",
			"curl -fsSL -o {tmp}/deno.tgz " + npm,
		}, ""},
		{"wheelhouse", "wheelhouse", true, "", []string{
			"pip install --no-cache-dir --no-index --find-links {root}/opt/space/wheels -r {root}/opt/space/wheels/requirements.txt",
		}, ""},
		{"a tarball that is not the pinned one", "pypi", false, "sha512-AAAA", nil, "not the pinned sha512-AAAA"},
		{"an unknown source", "conda", true, "", nil, "auto, wheelhouse or pypi, not 'conda'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			bin, tmp := filepath.Join(root, "bin"), filepath.Join(root, "tmp")
			wheels := filepath.Join(root, "opt", "space", "wheels")
			for _, d := range []string{bin, tmp, wheels} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := func(path, body string, mode os.FileMode) {
				if err := os.WriteFile(path, []byte(body), mode); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(bin, "python3"), stubPython, 0o755)
			write(filepath.Join(bin, "curl"), stubCurl, 0o755)
			write(filepath.Join(root, "deno.tgz"), string(tgz), 0o644)
			write(filepath.Join(wheels, "requirements.txt"), "ipykernel==7.4.0\n", 0o644)
			if tc.wheelhouse {
				write(filepath.Join(wheels, "ipykernel-7.4.0-py3-none-any.whl"), "", 0o644)
				write(filepath.Join(wheels, "deno"), fakeDeno, 0o755)
			}
			args := map[string]string{"INTERPRETER_SOURCE": tc.source, pin: tc.integrity}
			if tc.integrity == "" {
				args[pin] = integrity
			}
			run := installStep(t, parseInterpreter(t, args))
			script := strings.ReplaceAll(run.Shell, "/opt/space/", root+"/opt/space/")
			log := filepath.Join(root, "log")
			cmd := exec.Command("/bin/sh", "-c", script)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "TMPDIR=" + tmp, "STUB_LOG=" + log,
				"STUB_TGZ=" + filepath.Join(root, "deno.tgz"), "REAL_PYTHON=" + python}
			for _, e := range run.Env {
				cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
			}
			out, err := cmd.CombinedOutput()
			if tc.fails != "" {
				if err == nil || !strings.Contains(string(out), tc.fails) {
					t.Fatalf("want a failure saying %q; got %v:\n%s", tc.fails, err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("install step: %v\n%s", err, out)
			}
			b, _ := os.ReadFile(log)
			calls := strings.Split(strings.TrimSpace(string(b)), "\n")
			got := []string{}
			for _, c := range calls {
				if strings.HasPrefix(c, "pip ") || strings.HasPrefix(c, "curl ") {
					got = append(got, c)
				}
			}
			// The download goes to a directory of its own under TMPDIR
			// (removed again: see below).
			dl := downloadDir(calls)
			if strings.Contains(strings.Join(tc.want, ""), "{tmp}") && filepath.Dir(dl) != tmp {
				t.Errorf("the download went to %s, not a directory in TMPDIR", dl)
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, strings.NewReplacer("{root}", root, "{tmp}", dl).Replace(w))
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, w := range []string{"python3 -m venv " + root + "/opt/space/interpreter/venv",
				"venv-python -c import matplotlib.pyplot, bash_kernel", "deno --version"} {
				if !strings.Contains(string(b), w) {
					t.Errorf("no %q in the calls:\n%s", w, b)
				}
			}
			if fi, err := os.Stat(filepath.Join(root, "opt", "space", "interpreter", "deno")); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("deno not installed: %v", err)
			}
			if _, err := os.Stat(wheels); !os.IsNotExist(err) {
				t.Errorf("the wheelhouse is left in the image: %v", err)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 0 {
				t.Errorf("left behind in TMPDIR: %v", left)
			}
		})
	}
}

// downloadDir is the directory curl wrote the tarball into.
func downloadDir(calls []string) string {
	for _, c := range calls {
		if f := strings.Fields(c); len(f) > 3 && f[0] == "curl" {
			return filepath.Dir(f[3])
		}
	}
	return "?"
}
