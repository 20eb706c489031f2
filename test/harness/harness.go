// Package harness is the one test harness of the system suites (test/e2e,
// test/fault, test/redteam, test/egress, test/e2b): it checks the machine,
// builds the binaries under test once per test binary, starts and stops
// real spaced daemons, and looks at what they leave on the host. A fix here
// lands in every suite at once; what only one suite needs (red-team
// canaries, the egress stand-in internet, fault's full disks) stays in
// that suite, built on this.
//
// A suite's TestMain calls Main; its tests call Need (or start a daemon of
// their own with Own, which calls Need).
package harness

import (
	"fmt"
	"os"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// Suite is what Main needs to know about one test package.
type Suite struct {
	// Name names the package in messages, its temp dir and its API keys.
	Name string
	// Root says what the suite does as root, for the message when it is
	// not root ("they run spaced, runsc, netns and nftables").
	Root string
	// Setup runs before the tests (after the machine is checked), for
	// what every test shares, such as a daemon; an error fails the run.
	Setup func() error
	// Teardown runs after the tests, even when Setup failed; an error
	// fails the run (red-team canaries that changed, for example).
	Teardown func() error
}

// suite is the state of this test binary's suite.
var suite struct {
	name string
	skip string // why the suite cannot run here, or ""
	tmp  string // logs, data dirs and binaries; kept when the run fails
}

// Main runs the suite's tests and returns the exit code for TestMain. It
// checks for root, runsc and the base template; when one is missing it
// stops under strict mode and otherwise runs the tests, which skip with
// the reason (tests that need nothing, such as a doc check, still run).
func Main(m *testing.M, s Suite) int {
	suite.name = s.Name
	suite.skip = testenv.First(testenv.CheckRoot(s.Root), testenv.CheckRunsc(), testenv.CheckTemplate())
	if suite.skip != "" {
		if testenv.Unavailable(s.Name, suite.skip) {
			return 1
		}
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "space-"+s.Name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
		return 1
	}
	suite.tmp = tmp
	code := run(m, s)
	if err := unmountUnder(tmp); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
		code = 1
	}
	// SPACE_TEST_KEEP_LOGS keeps them after a pass too (to read timings).
	if code == 0 && os.Getenv("SPACE_TEST_KEEP_LOGS") == "" {
		os.RemoveAll(tmp)
	} else {
		fmt.Fprintf(os.Stderr, "%s: logs kept in %s\n", s.Name, tmp)
	}
	return code
}

func run(m *testing.M, s Suite) int {
	code := 0
	if s.Setup != nil {
		if err := s.Setup(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: setup: %v\n", s.Name, err)
			code = 1
		}
	}
	if code == 0 {
		code = m.Run()
	}
	if s.Teardown != nil {
		if err := s.Teardown(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: teardown: %v\n", s.Name, err)
			code = 1
		}
	}
	return code
}

// Need skips t (or, under strict mode, fails it) when the suite cannot run
// on this machine.
func Need(t testing.TB) {
	t.Helper()
	if suite.skip != "" {
		testenv.Skip(t, suite.skip)
	}
}

// Tmp is the suite's temporary directory, removed when every test passed.
func Tmp() string { return suite.tmp }
