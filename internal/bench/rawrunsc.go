package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// rawRunsc times a bare `runsc create` + `runsc start` of the template's
// root filesystem, with runsc's own default spec (sleep as init, no
// network), the same platform and the same overlay as spaced uses: the
// floor that spaced's cold create is compared against.
func rawRunsc(ctx context.Context, runsc, rootfs string, n int) (Sample, error) {
	dir, err := os.MkdirTemp("", "space-bench-runsc-")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "root")
	defer func() {
		for syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) == nil {
		}
		os.RemoveAll(dir)
	}()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, runsc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runsc spec: %w: %s", err, out)
	}
	if err := patchSpec(filepath.Join(bundle, "config.json"), rootfs); err != nil {
		return nil, err
	}
	var s Sample
	for i := range n + 1 {
		id := fmt.Sprintf("spacebench%04d%d", i, time.Now().UnixNano()%100000)
		flags := []string{"--root", root, "--platform", "systrap", "--network", "none",
			"--overlay2", fmt.Sprintf("root:dir=%s,size=1024m", dir)}
		// The sandbox inherits runsc's stdio: no pipes (they would never
		// close), so errors are read from runsc's log instead.
		flags = append(flags, "--log", filepath.Join(dir, "runsc.log"))
		start := time.Now()
		if err := exec.CommandContext(ctx, runsc, append(flags, "create", "--bundle", bundle, id)...).Run(); err != nil {
			return nil, fmt.Errorf("runsc create: %w (see %s)", err, filepath.Join(dir, "runsc.log"))
		}
		if err := exec.CommandContext(ctx, runsc, append(flags, "start", id)...).Run(); err != nil {
			return nil, fmt.Errorf("runsc start: %w", err)
		}
		d := time.Since(start)
		exec.CommandContext(ctx, runsc, append(flags, "delete", "--force", id)...).Run()
		if i > 0 { // the first run warms the page cache
			s = append(s, d)
		}
	}
	return s, nil
}

func patchSpec(path, rootfs string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("parse runsc spec: %w", err)
	}
	spec["root"] = map[string]any{"path": rootfs, "readonly": false}
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		return fmt.Errorf("runsc spec has no process")
	}
	proc["args"] = []string{"/bin/sleep", "infinity"}
	proc["terminal"] = false
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
