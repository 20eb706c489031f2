package interpretertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// R returns R with IRkernel (Debian's r-base-core and r-cran-irkernel,
// which scripts/install-deps.sh installs for the tests), or skips (strict:
// fails) tb.
func R(tb testing.TB) string {
	tb.Helper()
	testenv.NeedCommand(tb, "R")
	r, err := exec.LookPath("R")
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(r, "--no-echo", "--no-restore", "-e", `invisible(packageVersion("IRkernel"))`).CombinedOutput(); err != nil {
		testenv.Skipf(tb, "R cannot load IRkernel (apt-get install r-cran-irkernel): %v\n%s", err, out)
	}
	return r
}

// JJava returns the JDK's java and JJava's kernel jar (the jjava wheel of
// the wheelhouse, in Python's venv), or skips (strict: fails) tb when
// there is no JDK with JShell (scripts/install-deps.sh installs Debian's
// openjdk-17-jdk-headless for the tests).
func JJava(tb testing.TB) (java, jar string) {
	tb.Helper()
	python := Python(tb)
	testenv.NeedCommand(tb, "java")
	java, err := exec.LookPath("java")
	if err != nil {
		tb.Fatal(err)
	}
	out, err := exec.Command(java, "--list-modules").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "jdk.jshell@") {
		testenv.Skipf(tb, "%s has no JShell (apt-get install openjdk-17-jdk-headless): %v", java, err)
	}
	jar = filepath.Join(filepath.Dir(filepath.Dir(python)), "share", "jupyter", "kernels", "java", "jjava.jar")
	if _, err := os.Stat(jar); err != nil {
		tb.Fatalf("JJava's jar is not in the venv (scripts/interpreter-requirements.txt pins jjava): %v", err)
	}
	return java, jar
}
