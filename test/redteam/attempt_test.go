package redteam

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// attempt is one escape or abuse attempt. In-sandbox attempts name py, a
// function of attempts/*.py ("module.function") that records what it saw
// in the dict R; check then says whether the attack failed, and host, if
// set, looks at the host after the group ran. Attempts driven from outside
// (the API, the proxy, floods) carry run instead.
type attempt struct {
	id       string
	category string // filesystem, kernel, resources, control-plane, network
	// family groups attempts that are one mechanism tried against several
	// targets (routes, signals, spellings); "" is a family of its own.
	family string
	desc   string // what it tries
	stops  string // what stops it (docs/security.md)
	// control says what positive control shows that the mechanism works
	// where it is allowed (docs/security.md); an in-sandbox attempt with
	// one must report it in R['ctl'], and every entry there must be "".
	control string
	py      string
	args    map[string]any
	check   func(r res) error
	host    func(t *testing.T, sandboxID string) error
	run     func(t *testing.T) error
}

// mechanism is the attempt's family, or its id.
func (a attempt) mechanism() string {
	if a.family != "" {
		return a.family
	}
	return a.id
}

// scripts are the in-sandbox halves of the attempts: harness.py runs a
// group of them, rt.py holds what they share.
//
//go:embed attempts/*.py
var scripts embed.FS

// res is what an in-sandbox attempt recorded.
type res map[string]any

func (r res) s(k string) string {
	switch v := r[k].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func (r res) b(k string) bool { v, _ := r[k].(bool); return v }

func (r res) n(k string) float64 { v, _ := r[k].(float64); return v }

func ctxFor(t *testing.T) context.Context { return harness.Ctx(t, 30*time.Second) }

// upload puts every script into dir in sandbox id, readable by all.
func upload(t *testing.T, d *harness.Daemon, id, dir string) {
	t.Helper()
	entries, err := scripts.ReadDir("attempts")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := scripts.ReadFile("attempts/" + e.Name())
		if _, err := d.Client.Upload(ctxFor(t), id, dir+"/"+e.Name(), strings.NewReader(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, d, id, "root", "chmod -R a+rX "+dir)
}

type groupSpec struct {
	ID   string         `json:"id"`
	Py   string         `json:"py"`
	Args map[string]any `json:"args,omitempty"`
}

// runScripts runs the attempts' functions in sandbox id as user through
// harness.py and returns each one's R and raw result line.
// A broken command stream (the sandbox died) is an error.
func runScripts(t *testing.T, d *harness.Daemon, id, user string, group []attempt, extra map[string]string) (map[string]res, map[string]string, harness.Result, error) {
	t.Helper()
	dir := "/tmp/rt-" + harness.RandHex(4)
	upload(t, d, id, dir)
	var specs []groupSpec
	for _, a := range group {
		specs = append(specs, groupSpec{a.id, a.py, a.args})
	}
	b, _ := json.Marshal(specs)
	if _, err := d.Client.Upload(ctxFor(t), id, dir+"/group.json", strings.NewReader(string(b))); err != nil {
		t.Fatal(err)
	}
	sh(t, d, id, "root", "chmod a+r "+dir+"/group.json")
	paths, _ := json.Marshal(env.canary.paths())
	ifs, _ := json.Marshal(hostIfNames())
	cmdEnv := map[string]string{"RT_CANARY_PATHS": string(paths), "RT_HOST_IFS": string(ifs)}
	for k, v := range extra {
		cmdEnv[k] = v
	}
	out, err := d.Exec(harness.Ctx(t, 3*time.Minute), id, client.CommandRequest{
		Argv: []string{"python3", dir + "/harness.py", dir + "/group.json"},
		User: user,
		Cwd:  "/tmp",
		Env:  cmdEnv,
	})
	if err != nil {
		return nil, nil, out, fmt.Errorf("harness.py in %s: %w", id, err)
	}
	got := map[string]res{}
	rawLine := map[string]string{}
	for _, line := range strings.Split(out.Stdout, "\n") {
		j, ok := strings.CutPrefix(line, "RTRESULT ")
		if !ok {
			continue
		}
		var v struct {
			ID string `json:"id"`
			R  res    `json:"r"`
		}
		if err := json.Unmarshal([]byte(j), &v); err != nil {
			t.Errorf("bad harness line %q: %v", line, err)
			continue
		}
		got[v.ID], rawLine[v.ID] = v.R, j
	}
	return got, rawLine, out, nil
}

// runGroup runs the in-sandbox attempts of group in sandbox id as user,
// one subtest per attempt, then checks that nothing outside was disturbed.
func runGroup(t *testing.T, d *harness.Daemon, id, user string, group []attempt) {
	t.Helper()
	runGroupEnv(t, d, id, user, group, nil)
}

// runGroupEnv is runGroup with extra environment for the scripts.
func runGroupEnv(t *testing.T, d *harness.Daemon, id, user string, group []attempt, extra map[string]string) {
	t.Helper()
	start := time.Now()
	got, rawLine, out, err := runScripts(t, d, id, user, group, extra)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d attempts as %s in %s (exit %+v)", len(group), user, time.Since(start).Round(time.Millisecond), *out.Exit)
	leaks := secrets(t, d)
	for _, a := range group {
		t.Run(a.id, func(t *testing.T) {
			r, ok := got[a.id]
			if !ok {
				t.Fatalf("no result (harness exit %+v, stderr %s, stdout %s)", *out.Exit, harness.Clip(out.Stderr), harness.Clip(out.Stdout))
			}
			t.Logf("result: %s", rawLine[a.id])
			if err := noLeak(rawLine[a.id], leaks); err != nil {
				t.Errorf("%s: %v; result %v", a.desc, err, r)
			}
			if err := checkResult(a, r); err != nil {
				t.Errorf("%s: %v; result %v", a.desc, err, r)
			}
			if a.host != nil {
				if err := a.host(t, id); err != nil {
					t.Errorf("%s: on the host: %v", a.desc, err)
				}
			}
		})
	}
	guard(t, d)
}

// checkResult applies a's controls and check to r.
func checkResult(a attempt, r res) error {
	if r.s("harness") != "" || r.b("timeout") {
		return fmt.Errorf("the attempt did not complete: harness %q, timeout %v", r.s("harness"), r.b("timeout"))
	}
	if err := controlsOK(a, r); err != nil {
		return fmt.Errorf("positive control failed, so the result proves nothing: %w", err)
	}
	if err := a.check(r); err != nil {
		return fmt.Errorf("the attack was not stopped: %w", err)
	}
	return nil
}

// controlsOK: an attempt that declares a control reported it, and every
// control it reported worked.
func controlsOK(a attempt, r res) error {
	ctl, ok := r["ctl"].(map[string]any)
	switch {
	case a.control == "" && ok:
		return fmt.Errorf("the script reports controls %v the table does not describe", ctl)
	case a.control == "":
		return nil
	case !ok || len(ctl) == 0:
		return fmt.Errorf("no control reported (exc %q)", r.s("exc"))
	}
	names := make([]string, 0, len(ctl))
	for k := range ctl {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if s, _ := ctl[k].(string); s != "" || ctl[k] == nil {
			return fmt.Errorf("%s: %v", k, ctl[k])
		}
	}
	return nil
}

// inside runs one script function (py, with args) in sandbox id as user,
// outside any table, and returns what it recorded.
func inside(t *testing.T, d *harness.Daemon, id, user, py string, args map[string]any, timeout time.Duration) (res, error) {
	t.Helper()
	got, raw, out, err := runScripts(t, d, id, user, []attempt{{id: "one", py: py, args: args}},
		map[string]string{"RT_TIMEOUT": fmt.Sprint(timeout.Seconds())})
	if err != nil {
		return nil, err
	}
	r, ok := got["one"]
	if !ok {
		return nil, fmt.Errorf("%s: no result (exit %+v, stderr %s)", py, *out.Exit, harness.Clip(out.Stderr))
	}
	t.Logf("%s: %s", py, raw["one"])
	if r.s("exc") != "" || r.b("timeout") {
		return r, fmt.Errorf("%s did not complete: exc %q timeout %v", py, r.s("exc"), r.b("timeout"))
	}
	return r, nil
}

// noLeak fails when out contains a host or neighbour secret.
func noLeak(out string, leaks []string) error {
	for _, s := range leaks {
		if s != "" && strings.Contains(out, s) {
			return fmt.Errorf("output holds the secret %q", s)
		}
	}
	return nil
}

// Errnos that mean a refusal. A call refused with EINVAL, EFAULT, EBADF or
// ENOTTY proves nothing: it fails on any Linux because of its arguments.
var (
	// perm: the kernel checked a permission or a capability and said no.
	perm = []string{"EPERM", "EACCES"}
	// absent: the thing is not there (no file, device, family or call).
	absent = []string{"ENOENT", "ENOSYS", "ENODEV", "ENXIO", "EOPNOTSUPP", "ENOTSUP", "EAFNOSUPPORT", "EPROTONOSUPPORT"}
	// writeRefused: a write to a kernel setting that was not taken.
	writeRefused = []string{"EPERM", "EACCES", "EROFS", "EIO", "ENOENT"}
)

// refusedWith: R[k] is one of the errnos.
func refusedWith(k string, errs ...string) func(res) error {
	return func(r res) error {
		if e := r.s(k); slices.Contains(errs, e) {
			return nil
		}
		if r.s(k) == "" {
			return fmt.Errorf("%s: the call succeeded (exc %q)", k, r.s("exc"))
		}
		return fmt.Errorf("%s = %q, want a refusal: one of %v", k, r.s(k), errs)
	}
}

// allRefusedWith: every value of the dict R[k] is one of the errnos.
func allRefusedWith(k string, errs ...string) func(res) error {
	return func(r res) error {
		m, ok := r[k].(map[string]any)
		if !ok || len(m) == 0 {
			return fmt.Errorf("%s = %v, want a dict of errnos (exc %q)", k, r[k], r.s("exc"))
		}
		for _, name := range sortedKeys(m) {
			s, _ := m[name].(string)
			if !slices.Contains(errs, s) {
				if s == "" {
					return fmt.Errorf("%s: %s succeeded", k, name)
				}
				return fmt.Errorf("%s: %s = %q, want a refusal: one of %v", k, name, s, errs)
			}
		}
		return nil
	}
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// isFalse: R[k] is false (and present).
func isFalse(k string) func(res) error {
	return func(r res) error {
		v, ok := r[k].(bool)
		if !ok || v {
			return fmt.Errorf("%s is %v, want false", k, r[k])
		}
		return nil
	}
}

// equals: R[k] is the string want.
func equals(k, want string) func(res) error {
	return func(r res) error {
		if r.s(k) != want {
			return fmt.Errorf("%s = %q, want %q", k, r.s(k), want)
		}
		return nil
	}
}

// nonEmpty: R[k] is a non-empty list or string.
func nonEmpty(k string) func(res) error {
	return func(r res) error {
		switch v := r[k].(type) {
		case []any:
			if len(v) > 0 {
				return nil
			}
		case string:
			if v != "" {
				return nil
			}
		}
		return fmt.Errorf("%s = %v, want something (exc %q)", k, r[k], r.s("exc"))
	}
}

// all combines checks.
func all(checks ...func(res) error) func(res) error {
	return func(r res) error {
		for _, c := range checks {
			if err := c(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// anyOf passes when one of checks does.
func anyOf(checks ...func(res) error) func(res) error {
	return func(r res) error {
		var errs []error
		for _, c := range checks {
			err := c(r)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// noExc: the script ran to its end.
func noExc(r res) error {
	if r.s("exc") != "" {
		return fmt.Errorf("the attempt did not complete: exc %q", r.s("exc"))
	}
	return nil
}
