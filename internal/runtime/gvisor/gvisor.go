// Package gvisor is the runtime driver for gVisor's runsc. Each sandbox gets
// an OCI bundle in <dir>/sandboxes/<id>; runsc keeps its own state under
// <dir>/runsc (its --root), which is what lets spaced re-attach after a
// restart: the sandbox processes do not belong to spaced.
package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

// Config of the driver.
type Config struct {
	// Logger receives the runtime's log lines (nil: discarded).
	Logger *slog.Logger
	// Runsc is the runsc binary.
	Runsc string
	// Dir holds bundles and runsc state.
	Dir string
	// Debug writes runsc debug logs into each sandbox's directory.
	Debug bool
	// FastPath leaves systrap's fast path on: the sentry and the stub
	// threads of a sandbox at work spin instead of sleeping between
	// system calls. Off, runsc runs with --systrap-disable-fast-path.
	FastPath bool
}

// Runtime drives runsc.
type Runtime struct {
	cfg Config

	versionOnce sync.Once
	version     string

	// layerFDs remembers where each sandbox's writable layer file is open
	// (usage.go).
	layerMu  sync.Mutex
	layerFDs map[string]string
}

var idPattern = regexp.MustCompile(`^[a-z0-9]{8,64}$`)

// New checks the runsc binary and makes the driver's directories.
func New(cfg Config) (*Runtime, error) {
	if _, err := os.Stat(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("runsc: %w", err)
	}
	for _, d := range []string{cfg.rootDir(), cfg.sandboxesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runtime dir: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{cfg: cfg}
	// A runsc command may still be running under this root, started by a
	// spaced killed in the middle of a create (runsc runs in its own
	// process group and outlives it). Let it finish before anything looks
	// at the root, or the sandbox it makes would appear after the
	// restart's teardown, owned by nobody.
	r.waitCommands(30 * time.Second)
	return r, nil
}

func (c Config) rootDir() string      { return filepath.Join(c.Dir, "runsc") }
func (c Config) sandboxesDir() string { return filepath.Join(c.Dir, "sandboxes") }
func (r *Runtime) sandboxDir(id string) string {
	return filepath.Join(r.cfg.sandboxesDir(), id)
}

func (r *Runtime) Name() string { return "gvisor" }

func (r *Runtime) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{Checkpoint: true, LiveDiskSnapshot: true}
}

// flags are runsc's global flags for sandbox id. They are stored with the
// bundle so every later command sees the same ones.
func (r *Runtime) flags(id string, diskMB int) []string {
	dir := r.sandboxDir(id)
	f := []string{
		"--root", r.cfg.rootDir(),
		"--platform", "systrap",
		"--network", "sandbox",
		// sudo inside the sandbox needs set-user-ID binaries; they raise
		// privileges only within the gVisor kernel.
		"--allow-suid",
		// The writable layer: a gVisor tmpfs over the shared read-only
		// image, backed by a file in the sandbox's directory (so its pages
		// are reclaimable host page cache, not pinned memory), bounded by
		// the sandbox's disk size.
		"--overlay2", fmt.Sprintf("root:dir=%s,size=%dm", dir, diskMB),
		// Volumes (bind mounts) are shared with the host and other
		// sandboxes: the sentry revalidates its caches of them (runsc's
		// default, said here because volumes rely on it).
		"--file-access-mounts", "shared",
		"--log", r.logFile(id),
		// Where the sentry's and gofer's Go runtime write a panic or fatal
		// error: without it they go to runsc's stdio (/dev/null), and a
		// sandbox that dies of one leaves no trace (ExitReason reads it).
		"--panic-log", r.panicLogFile(id),
	}
	if !r.cfg.FastPath {
		// Spinning pays where a sandbox has cores to itself; on a node
		// whose sandboxes share few, it takes the CPU the work needs:
		// commands took 13-22% less time without it here (docs/benchmarks.md).
		f = append(f, "--systrap-disable-fast-path")
	}
	if r.cfg.Debug {
		f = append(f, "--debug", "--debug-log", filepath.Join(dir, "debug")+"/")
	} else {
		// The sentry's own log at its info level (about 16 KB a boot): it
		// ends with how the sandbox's init exited ("application exiting
		// with killed by signal 9"), which nothing else on the host keeps.
		f = append(f, "--debug-log", r.bootLogFile(id), "--debug-command", "boot")
	}
	return f
}

// Run is `runsc run --detach`: runsc's create and start in one command,
// which on these machines takes about 12 ms less than the two (one runsc
// start on the host fewer; docs/benchmarks.md).
func (r *Runtime) Run(ctx context.Context, spec runtime.Spec) error {
	return r.make(ctx, spec, func(flags []string, bundle string) error {
		args := append(append([]string{}, flags...), "run", "--detach", "--bundle", bundle)
		if spec.DiskImage != "" {
			args = append(args, "--fs-restore-image-path", spec.DiskImage)
		}
		args = append(args, spec.ID)
		if err := r.runDetached(ctx, "run", r.logFile(spec.ID), spec.Priority, args...); err != nil {
			return errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox engine could not start the sandbox")
		}
		return nil
	})
}

// make writes the bundle and flags of spec, then runs launch (runsc run or
// restore). On any failure everything made for spec.ID is removed.
func (r *Runtime) make(ctx context.Context, spec runtime.Spec, launch func(flags []string, bundle string) error) (err error) {
	if !idPattern.MatchString(spec.ID) {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", spec.ID)
	}
	dir := r.sandboxDir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if os.IsExist(err) {
			return errdefs.New(errdefs.ErrAlreadyExists, "sandbox %q already exists", spec.ID)
		}
		return fmt.Errorf("sandbox dir: %w", err)
	}
	defer func() {
		if err != nil {
			if derr := r.Destroy(context.WithoutCancel(ctx), spec.ID); derr != nil {
				r.cfg.Logger.Warn("cleanup after failed create", "sandbox", spec.ID, "err", derr)
			}
		}
	}()
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o700); err != nil {
		return fmt.Errorf("bundle dir: %w", err)
	}
	data, err := json.Marshal(ociSpec(spec))
	if err != nil {
		return fmt.Errorf("encode OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("write OCI spec: %w", err)
	}
	flags := r.flags(spec.ID, spec.Limits.DiskMB)
	if err := writeJSON(filepath.Join(dir, "flags.json"), flags); err != nil {
		return err
	}
	return launch(flags, bundle)
}

func (r *Runtime) logFile(id string) string     { return filepath.Join(r.sandboxDir(id), "runsc.log") }
func (r *Runtime) bootLogFile(id string) string { return filepath.Join(r.sandboxDir(id), "boot.log") }
func (r *Runtime) panicLogFile(id string) string {
	return filepath.Join(r.sandboxDir(id), "panic.log")
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// savedFlags are the flags Create stored; a sandbox made by an older spaced
// without them gets just --root.
func (r *Runtime) savedFlags(id string) []string {
	var f []string
	data, err := os.ReadFile(filepath.Join(r.sandboxDir(id), "flags.json"))
	if err == nil && json.Unmarshal(data, &f) == nil {
		return f
	}
	return []string{"--root", r.cfg.rootDir()}
}

func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	r.releaseRest(ctx, id)
	flags := r.savedFlags(id)
	if _, err := r.run(ctx, append(flags, "kill", id, "TERM")...); err != nil {
		if st, _ := r.State(ctx, id); st != runtime.StateRunning {
			return nil
		}
		return fmt.Errorf("stop %s: %w", id, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if st, _ := r.State(ctx, id); st != runtime.StateRunning {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := r.run(ctx, append(flags, "kill", "--all", id, "KILL")...)
	return err
}

// Destroy deletes the runsc container (forcefully) and the sandbox's
// directory. Every step tolerates what is already gone.
func (r *Runtime) Destroy(ctx context.Context, id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	r.forgetLayer(id)
	r.releaseRest(ctx, id)
	var errs []error
	// runsc holds a container exactly when its state file exists; a failed
	// delete matters only if the container is still there afterwards.
	if exists(r.stateFile(id)) {
		if _, err := r.run(ctx, append(r.savedFlags(id), "delete", "--force", id)...); err != nil && exists(r.stateFile(id)) {
			errs = append(errs, fmt.Errorf("runsc delete %s: %w", id, err))
		}
	}
	// runsc leaves the sandbox's control socket behind.
	os.Remove(filepath.Join(r.cfg.rootDir(), "runsc-"+id+".sock"))
	if err := removeCgroups(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(r.sandboxDir(id)); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
	}
	return errors.Join(errs...)
}

// ExitReason tells an out-of-memory kill from other deaths, from the
// memory cgroup runsc made (it stays until Destroy).
func (r *Runtime) ExitReason(ctx context.Context, id string) string {
	if !idPattern.MatchString(id) {
		return ""
	}
	// What runsc and the sentry wrote is for the operator, not the
	// sandbox's owner: logged here, summed up in the reason. A panic log
	// starts with the panic and the goroutine that raised it; runsc's log
	// ends with what happened last.
	if tail := tailOf(r.logFile(id), 4<<10); tail != "" {
		r.cfg.Logger.Warn("stopped sandbox's runsc log", "sandbox", id, "tail", tail)
	}
	exit := ""
	if tail := logLines(tailOf(r.bootLogFile(id), 16<<10), 12); tail != "" {
		r.cfg.Logger.Warn("stopped sandbox's engine log", "sandbox", id, "tail", tail)
		exit = initExit(tail)
	}
	panicked := false
	if head := headOf(r.panicLogFile(id), 4<<10); head != "" {
		r.cfg.Logger.Error("stopped sandbox's engine panicked", "sandbox", id, "panic_log", r.panicLogFile(id), "head", head)
		panicked = true
	}
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cgroupParent, id, "memory.oom_control"))
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
				return "out of memory: the sandbox used more than its memory limit"
			}
		}
	}
	switch {
	case panicked:
		return "the sandbox engine failed (an internal error, logged on the node)"
	case exit != "":
		return "the sandbox's init process ended (" + exit + ")"
	}
	return ""
}

// logLines is the last n lines of a runsc log that are log lines ("I1205
// 09:23:04.499932 1 kernel.go:1312] ..."), without its timing tables.
func logLines(log string, n int) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		if len(line) > 5 && strings.ContainsRune("IWEF", rune(line[0])) && line[1] >= '0' && line[1] <= '9' && !strings.Contains(line, " timing.go:") {
			keep = append(keep, line)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

// maxBootLog bounds a running sandbox's boot.log. What the guest can make
// the sentry log there is bounded by gVisor (100 lines for each
// unimplemented system call, about 13 MB in all), but not small; what
// ExitReason reads is the end.
const maxBootLog = 1 << 20

// RunLogBound bounds the boot.log of every running sandbox
// (boundBootLogs) every interval until ctx ends.
func (r *Runtime) RunLogBound(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.boundBootLogs(ctx)
		}
	}
}

// boundBootLogs empties each running sandbox's boot.log that is over
// maxBootLog (boundBootLog). A stopped sandbox's log is left whole:
// ExitReason reads its end. A log under the bound, nearly every one, costs
// a stat; runsc's state is read only for one over it.
func (r *Runtime) boundBootLogs(ctx context.Context) {
	ids, err := r.List(ctx)
	if err != nil {
		r.cfg.Logger.Warn("bound the sandboxes' engine logs", "err", err)
		return
	}
	for _, id := range ids {
		if st, err := os.Stat(r.bootLogFile(id)); err != nil || st.Size() <= maxBootLog {
			continue
		}
		if st, err := r.State(ctx, id); err == nil && st == runtime.StateRunning {
			r.boundBootLog(id)
		}
	}
}

// boundBootLog empties the boot.log of running sandbox id once it is over
// maxBootLog. The sentry appends (O_APPEND), so its next line starts the
// emptied file.
func (r *Runtime) boundBootLog(id string) {
	path := r.bootLogFile(id)
	if st, err := os.Stat(path); err == nil && st.Size() > maxBootLog {
		if err := os.Truncate(path, 0); err != nil {
			r.cfg.Logger.Warn("empty a sandbox's engine log", "sandbox", id, "err", err)
		}
	}
}

// initExit is how the sentry's log says the sandbox's init process ended
// ("killed by signal 9", "exit status 3"), or "".
func initExit(log string) string {
	const marker = "application exiting with "
	i := strings.LastIndex(log, marker)
	if i < 0 {
		return ""
	}
	line, _, _ := strings.Cut(log[i+len(marker):], "\n")
	return strings.TrimSpace(line)
}

// headOf is at most the first n bytes of the file at path, trimmed; "" when
// it is empty or missing.
func headOf(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	data, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(data))
}

// tailOf is at most the last n bytes of the file at path, trimmed; "" when
// it is empty or missing.
func tailOf(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		if _, err := f.Seek(-n, io.SeekEnd); err != nil {
			return ""
		}
	}
	data, _ := io.ReadAll(io.LimitReader(f, n))
	return strings.TrimSpace(string(data))
}

var _ runtime.Prioritizer = (*Runtime)(nil)

// Foreground gives a sandbox made with a Spec.Priority the CPU share of
// every other sandbox: cpu.shares on cgroup v1, cpu.weight on v2.
func (r *Runtime) Foreground(_ context.Context, id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	for _, dir := range CgroupDirs(id) {
		for file, value := range map[string]int{"cpu.shares": defaultShares, "cpu.weight": 100} {
			path := filepath.Join(dir, file)
			if !exists(path) {
				continue
			}
			if err := os.WriteFile(path, []byte(strconv.Itoa(value)), 0o644); err != nil {
				return fmt.Errorf("set the normal CPU priority of %s: %w", id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("set the normal CPU priority of %s: no cpu cgroup", id)
}

// ProcessAlive reports whether pid exists and has not exited. A killed
// sandbox process is a zombie until its parent (the host's init, since runsc
// create exits) reaps it, which can take seconds; kill(pid, 0) still
// succeeds on a zombie.
func ProcessAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || (data[i+2] != 'Z' && data[i+2] != 'X')
}

// cgroupParent is where sandbox cgroups live in every hierarchy.
const cgroupParent = "space"

// CgroupDirs returns the cgroup directories of sandbox id that exist.
// The hierarchies under /sys/fs/cgroup are listed once: the samplers ask
// for every sandbox every second or so, and a glob (a directory read and
// a sort per call) was half of an idle spaced's CPU with 100 sandboxes.
func CgroupDirs(id string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		if d := filepath.Join(h, cgroupParent, id); lexists(d) {
			dirs = append(dirs, d)
		}
	}
	if d := filepath.Join(cgroupRoot, cgroupParent, id); lexists(d) {
		dirs = append(dirs, d) // cgroup v2
	}
	return dirs
}

const cgroupRoot = "/sys/fs/cgroup"

var hierarchies struct {
	mu   sync.Mutex
	dirs []string
}

// cgroupHierarchies are the directories under /sys/fs/cgroup (cgroup v1
// hierarchies, and their aliases such as cpu -> cpu,cpuacct), sorted;
// read again until the list is not empty.
func cgroupHierarchies() []string {
	hierarchies.mu.Lock()
	defer hierarchies.mu.Unlock()
	if len(hierarchies.dirs) == 0 {
		entries, _ := os.ReadDir(cgroupRoot) // sorted by name
		for _, e := range entries {
			if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
				hierarchies.dirs = append(hierarchies.dirs, filepath.Join(cgroupRoot, e.Name()))
			}
		}
	}
	return hierarchies.dirs
}

func lexists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// removeCgroups removes what runsc leaves of a sandbox's cgroups (it does
// not always remove them, for example after a stopped sandbox is deleted).
// Only empty cgroups can be removed. The sandbox's processes were killed
// just before, but on a loaded host the kernel may still be ending them
// (seen with 800 sandboxes on 2 cores: EBUSY, and the kill answered 500),
// so a busy cgroup is tried again until cgroupBusyWait has passed.
func removeCgroups(ctx context.Context, id string) error {
	deadline := time.Now().Add(cgroupBusyWait)
	for {
		var errs []error
		busy := false
		for _, d := range CgroupDirs(id) {
			syscall.Rmdir(filepath.Join(d, restCgroup)) // the idle freezer's (freezer.go), first
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				busy = busy || errors.Is(err, syscall.EBUSY)
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
		if !busy || time.Now().After(deadline) {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cgroupBusyWait bounds how long a teardown waits for the killed
// processes of a sandbox to leave its cgroups.
const cgroupBusyWait = 10 * time.Second

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// runscState is the part of runsc's state file spaced reads.
type runscState struct {
	Status   string `json:"status"`
	GoferPid int    `json:"goferPid"`
	Sandbox  struct {
		Pid int `json:"pid"`
	} `json:"sandbox"`
}

func (r *Runtime) stateFile(id string) string {
	return filepath.Join(r.cfg.rootDir(), id+"_sandbox:"+id+".state")
}

// State reads runsc's state file rather than running `runsc state`: the
// reaper asks about every live sandbox every few seconds, and a fork of
// runsc per question would cost more than the sandboxes themselves.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	data, err := os.ReadFile(r.stateFile(id))
	if os.IsNotExist(err) {
		return runtime.StateUnknown, nil
	}
	if err != nil {
		return runtime.StateUnknown, fmt.Errorf("read runsc state: %w", err)
	}
	var st runscState
	if err := json.Unmarshal(data, &st); err != nil {
		// runsc rewrites the file in place; a torn read is retried once.
		time.Sleep(5 * time.Millisecond)
		if data, err = os.ReadFile(r.stateFile(id)); err != nil || json.Unmarshal(data, &st) != nil {
			return runtime.StateUnknown, fmt.Errorf("parse runsc state of %s", id)
		}
	}
	switch st.Status {
	case "created":
		return runtime.StateCreated, nil
	case "running":
		// The file says running until runsc is told otherwise; the sandbox
		// process may have died under it (killed, out of memory).
		if !ProcessAlive(st.Sandbox.Pid) {
			return runtime.StateStopped, nil
		}
		return runtime.StateRunning, nil
	case "paused":
		if !ProcessAlive(st.Sandbox.Pid) {
			return runtime.StateStopped, nil
		}
		return runtime.StatePaused, nil
	case "stopped":
		return runtime.StateStopped, nil
	}
	return runtime.StateUnknown, nil
}

// List reads runsc's state directory rather than running `runsc list`: it
// is cheaper and does not fail on a corrupt entry.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(r.cfg.rootDir())
	if err != nil {
		return nil, fmt.Errorf("list runsc state: %w", err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		// State files are named "<container>_sandbox:<sandbox>.state".
		if !strings.HasSuffix(name, ".state") {
			continue
		}
		id, _, ok := strings.Cut(name, "_sandbox:")
		if ok && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	// Sandbox dirs without runsc state are half-made creates.
	dirs, _ := os.ReadDir(r.cfg.sandboxesDir())
	for _, d := range dirs {
		if !seen[d.Name()] {
			seen[d.Name()] = true
			ids = append(ids, d.Name())
		}
	}
	return ids, nil
}

// runDetached runs a runsc command whose children outlive it (run,
// restore): the sandbox inherits runsc's stdio, so it gets /dev/null rather
// than a pipe that would never close, and errors are read back from runsc's
// log. The command of a sandbox made at PriorityUrgent runs at that
// priority too (restoreCgroup).
func (r *Runtime) runDetached(ctx context.Context, verb, logPath string, prio runtime.Priority, args ...string) error {
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, args...)
	if err := r.start(cmd, prio); err != nil {
		return fmt.Errorf("runsc %s: %w", verb, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", verb, err, lastLines(logPath, 3))
	}
	return nil
}

// start starts cmd in its own process group, in the restore cgroup when
// prio is urgent. A command that cannot be moved there still runs, at
// spaced's priority: slower under load, not wrong.
func (r *Runtime) start(cmd *exec.Cmd, prio runtime.Priority) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if prio == runtime.PriorityUrgent {
		if err := joinRestoreCgroup(cmd.Process.Pid); err != nil {
			r.cfg.Logger.Warn("runsc command left at spaced's CPU priority", "err", err)
		}
	}
	return nil
}

// lastLines returns the last n lines of a log file (from its last 64 KiB),
// for error messages.
func lastLines(path string, n int) string {
	tail := tailOf(path, 64<<10)
	if tail == "" {
		return ""
	}
	lines := strings.Split(tail, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (r *Runtime) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// Own process group: a signal to spaced's group must not reach runsc.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("runsc %s: %w: %s", args[len(args)-2], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// waitCommands waits (up to timeout) until no runsc command under this
// driver's root is running: a command line of our runsc with our --root
// (the sandbox and gofer processes, named runsc-sandbox and runsc-gofer,
// are not commands).
func (r *Runtime) waitCommands(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for r.commandRunning() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *Runtime) commandRunning() bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	root := r.cfg.rootDir()
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if filepath.Base(args[0]) != filepath.Base(r.cfg.Runsc) {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--root" && args[i+1] == root {
				return true
			}
		}
	}
	return false
}

var _ runtime.Resizer = (*Runtime)(nil)

// Resizable: only the CPU limit changes in place, and only between values
// the guest cannot tell apart. runsc fixes at boot what the guest sees of
// its memory (MemTotal, the --total-memory of the sentry), its disk (the
// overlay's size) and its process limit (the init's RLIMIT_NPROC), and of
// its CPUs the count: the quota rounded up, at least 2 (fewer can make
// programs drop locks) and at most the host's cores (runsc/sandbox:
// --cpu-num). The quota itself is the host's cgroup, which can change.
func (r *Runtime) Resizable(from, to runtime.Limits) bool {
	return from.MemoryMB == to.MemoryMB && from.DiskMB == to.DiskMB && from.MaxProcs == to.MaxProcs &&
		guestCPUs(from.CPUs) == guestCPUs(to.CPUs)
}

func guestCPUs(n int) int { return min(goruntime.NumCPU(), max(2, n)) }

// Resize writes the sandbox's CPU quota into its cgroup (cgroup v1
// cpu.cfs_quota_us, v2 cpu.max; the period stays 100 ms), as its OCI spec
// set it at create.
func (r *Runtime) Resize(_ context.Context, id string, to runtime.Limits) error {
	if !idPattern.MatchString(id) {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	quota := int64(to.CPUs) * cpuPeriod
	for _, dir := range CgroupDirs(id) {
		for file, value := range map[string]string{
			"cpu.cfs_quota_us": strconv.FormatInt(quota, 10),
			"cpu.max":          fmt.Sprintf("%d %d", quota, cpuPeriod),
		} {
			path := filepath.Join(dir, file)
			if !exists(path) {
				continue
			}
			if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
				return fmt.Errorf("set the CPU limit of %s: %w", id, err)
			}
			return nil
		}
	}
	return errdefs.New(errdefs.ErrNotFound, "set the CPU limit of %s: no cpu cgroup", id)
}
