package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// rawRunsc times bare `runsc create` + `runsc start` runs of the template's
// root filesystem, with runsc's own default spec (sleep as init, no
// network), the same platform and the same overlay as spaced uses: the
// floor that spaced's cold create is compared against. It also times the
// same sandbox made by one `runsc run --detach`, the way spaced makes its
// own: the stricter floor.
type rawRunsc struct {
	runsc, dir, root, bundle string
	runs                     atomic.Int64 // names sandboxes apart
}

func newRawRunsc(ctx context.Context, runsc, rootfs string) (_ *rawRunsc, err error) {
	dir, err := os.MkdirTemp("", "space-bench-runsc-")
	if err != nil {
		return nil, err
	}
	r := &rawRunsc{runsc: runsc, dir: dir, root: filepath.Join(dir, "root"), bundle: filepath.Join(dir, "bundle")}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := os.MkdirAll(r.bundle, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, runsc, "spec", "--bundle", r.bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runsc spec: %w: %s", err, out)
	}
	if err := patchSpec(filepath.Join(r.bundle, "config.json"), rootfs); err != nil {
		return nil, err
	}
	// The first run warms the page cache and is not counted.
	if _, err := r.once(ctx, createStart); err != nil {
		return nil, err
	}
	return r, nil
}

// rawStart is how a raw run makes its sandbox.
type rawStart int

const (
	createStart rawStart = iota // runsc create, then runsc start
	runDetach                   // runsc run --detach
)

// once times one create+start (or run), then deletes the sandbox.
func (r *rawRunsc) once(ctx context.Context, how rawStart) (time.Duration, error) {
	return r.cycle(ctx, fmt.Sprintf("spacebench%04d%d", r.runs.Add(1), time.Now().UnixNano()%100000), how)
}

// churn runs create+start+delete (or run+delete) cycles, conc at a time,
// for about d, and returns how many ended and how long they took.
func (r *rawRunsc) churn(ctx context.Context, conc int, d time.Duration, how rawStart) (int, time.Duration, error) {
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, conc)
	)
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for time.Since(start) < d {
				if _, err := r.cycle(ctx, fmt.Sprintf("spacebenchchurn%d-%d", w, r.runs.Add(1)), how); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return int(n.Load()), time.Since(start), nil
}

// cycle times a create+start (or run) of sandbox id, then deletes it.
func (r *rawRunsc) cycle(ctx context.Context, id string, how rawStart) (time.Duration, error) {
	flags := r.flags()
	logPath := filepath.Join(r.dir, "runsc.log")
	start := time.Now()
	if how == runDetach {
		if err := exec.CommandContext(ctx, r.runsc, append(flags, "run", "--detach", "--bundle", r.bundle, id)...).Run(); err != nil {
			return 0, fmt.Errorf("runsc run: %w (see %s)", err, logPath)
		}
	} else {
		if err := exec.CommandContext(ctx, r.runsc, append(flags, "create", "--bundle", r.bundle, id)...).Run(); err != nil {
			return 0, fmt.Errorf("runsc create: %w (see %s)", err, logPath)
		}
		if err := exec.CommandContext(ctx, r.runsc, append(flags, "start", id)...).Run(); err != nil {
			return 0, fmt.Errorf("runsc start: %w", err)
		}
	}
	d := time.Since(start)
	exec.CommandContext(ctx, r.runsc, append(flags, "delete", "--force", id)...).Run()
	return d, nil
}

// execs starts a container and times n `runsc exec` runs of sh -c true in
// it (after a few not counted).
func (r *rawRunsc) execs(ctx context.Context, n int) (Sample, error) {
	id := fmt.Sprintf("spacebenchexec%04d%d", r.runs.Add(1), time.Now().UnixNano()%100000)
	flags := r.flags()
	if err := exec.CommandContext(ctx, r.runsc, append(flags, "run", "--detach", "--bundle", r.bundle, id)...).Run(); err != nil {
		return nil, fmt.Errorf("runsc run: %w (see %s)", err, filepath.Join(r.dir, "runsc.log"))
	}
	defer exec.Command(r.runsc, append(flags, "delete", "--force", id)...).Run()
	var s Sample
	for i := range n + 3 {
		start := time.Now()
		if err := exec.CommandContext(ctx, r.runsc, append(flags, "exec", id, "/bin/sh", "-c", "true")...).Run(); err != nil {
			return nil, fmt.Errorf("runsc exec: %w", err)
		}
		if i >= 3 {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// flags are the global flags of every run: spaced's platform and overlay,
// no network. The sandbox inherits runsc's stdio: no pipes (they would
// never close), so errors are read from runsc's log instead.
func (r *rawRunsc) flags() []string {
	return []string{"--root", r.root, "--platform", "systrap", "--network", "none",
		"--overlay2", fmt.Sprintf("root:dir=%s,size=1024m", r.dir), "--log", filepath.Join(r.dir, "runsc.log")}
}

func (r *rawRunsc) close() {
	for syscall.Unmount(filepath.Join(r.root, "null-netns"), syscall.MNT_DETACH) == nil {
	}
	os.RemoveAll(r.dir)
}

func patchSpec(path, rootfs string) error {
	return editSpec(path, func(spec, proc map[string]any) {
		spec["root"] = map[string]any{"path": rootfs, "readonly": false}
		proc["args"] = []string{"/bin/sleep", "infinity"}
		proc["terminal"] = false
	})
}

// editSpec rewrites the runsc spec at path with edit, which is given the
// spec and its process.
func editSpec(path string, edit func(spec, proc map[string]any)) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("parse runsc spec: %w", err)
	}
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		return fmt.Errorf("runsc spec has no process")
	}
	edit(spec, proc)
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// rawRestore times bare `runsc restore` runs of one checkpoint of a raw
// container whose process is the bench's HTTP template's server (python3
// -m http.server), same platform and overlay: the floor under a create of
// a template whose start command is restored running.
type rawRestore struct {
	raw   *rawRunsc
	image string
}

func newRawRestore(ctx context.Context, runsc, rootfs string) (_ *rawRestore, err error) {
	raw, err := newRawRunsc(ctx, runsc, rootfs)
	if err != nil {
		return nil, err
	}
	r := &rawRestore{raw: raw, image: filepath.Join(raw.dir, "image")}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := setArgs(filepath.Join(raw.bundle, "config.json"), "python3", "-m", "http.server", "8000", "--directory", "/tmp"); err != nil {
		return nil, err
	}
	id := fmt.Sprintf("spacebenchckpt%d", time.Now().UnixNano()%100000)
	flags := raw.flags()
	if err := exec.CommandContext(ctx, runsc, append(flags, "run", "--detach", "--bundle", raw.bundle, id)...).Run(); err != nil {
		return nil, fmt.Errorf("runsc run: %w", err)
	}
	// The server listens well within this (no network to ask it from
	// here: --network none).
	time.Sleep(2 * time.Second)
	// (No pipes on any of these: the sandbox inherits runsc's stdio and
	// would hold them open; errors are in runsc's log.)
	if err := exec.CommandContext(ctx, runsc, append(flags, "checkpoint", "--image-path", r.image, id)...).Run(); err != nil {
		exec.Command(runsc, append(flags, "delete", "--force", id)...).Run()
		return nil, fmt.Errorf("runsc checkpoint: %w (see %s)", err, filepath.Join(raw.dir, "runsc.log"))
	}
	exec.CommandContext(ctx, runsc, append(flags, "delete", "--force", id)...).Run()
	if _, err := r.once(ctx); err != nil { // warms the page cache; not counted
		return nil, err
	}
	return r, nil
}

// once times one restore (until runsc returns: the process runs again),
// then deletes the sandbox.
func (r *rawRestore) once(ctx context.Context) (time.Duration, error) {
	id := fmt.Sprintf("spacebenchrst%04d%d", r.raw.runs.Add(1), time.Now().UnixNano()%100000)
	flags := r.raw.flags()
	start := time.Now()
	if err := exec.CommandContext(ctx, r.raw.runsc, append(flags, "restore", "--detach", "--bundle", r.raw.bundle, "--image-path", r.image, id)...).Run(); err != nil {
		return 0, fmt.Errorf("runsc restore: %w (see %s)", err, filepath.Join(r.raw.dir, "runsc.log"))
	}
	d := time.Since(start)
	exec.CommandContext(ctx, r.raw.runsc, append(flags, "delete", "--force", id)...).Run()
	return d, nil
}

func (r *rawRestore) close() { r.raw.close() }

// setArgs sets the process of the spec at path.
func setArgs(path string, args ...string) error {
	return editSpec(path, func(_, proc map[string]any) { proc["args"] = args })
}
