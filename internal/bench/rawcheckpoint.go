package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// rawCheckpoint is the anchor of the pause and resume figures: a bare
// runsc container of the template's root filesystem (same platform and
// overlay as spaced, no network, no cgroup limits, nothing encrypted or
// uploaded) whose process holds the same memory as the measured sandbox.
// Its checkpoint (`runsc checkpoint --leave-running` to a local directory)
// is the floor under a pause; `runsc restore --background` of that image
// into a new container, page cache warm as spaced's own just-downloaded
// image is, and a first `runsc exec` are the floor under a resume.
type rawCheckpoint struct {
	raw *rawRunsc
	id  string
}

func newRawCheckpoint(ctx context.Context, runsc, rootfs string, sizeMiB int) (_ *rawCheckpoint, err error) {
	args := []string{"/bin/sleep", "infinity"}
	if sizeMiB > 0 {
		args = []string{"python3", "-c", holdMemory, strconv.Itoa(sizeMiB)}
	}
	r, err := runRawContainer(ctx, runsc, rootfs, "spacebenchhold", func(config string) error { return setArgs(config, args...) })
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	flags := r.raw.flags()
	if sizeMiB > 0 {
		deadline := time.Now().Add(time.Minute)
		for exec.CommandContext(ctx, runsc, append(flags, "exec", r.id, "test", "-e", "/tmp/held")...).Run() != nil {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("raw container: the memory was not held within a minute")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return r, nil
}

// runRawContainer runs a detached container of rootfs under runsc, named
// prefix and a number, whose bundle's config.json setProcess edits first.
func runRawContainer(ctx context.Context, runsc, rootfs, prefix string, setProcess func(config string) error) (_ *rawCheckpoint, err error) {
	raw, err := newRawRunsc(ctx, runsc, rootfs)
	if err != nil {
		return nil, err
	}
	r := &rawCheckpoint{raw: raw, id: fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%100000)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := setProcess(filepath.Join(raw.bundle, "config.json")); err != nil {
		return nil, err
	}
	if err := exec.CommandContext(ctx, runsc, append(raw.flags(), "run", "--detach", "--bundle", raw.bundle, r.id)...).Run(); err != nil {
		return nil, fmt.Errorf("runsc run: %w (see %s)", err, filepath.Join(raw.dir, "runsc.log"))
	}
	return r, nil
}

// checkpoint times one checkpoint of the running container into a new
// directory, which it returns.
func (r *rawCheckpoint) checkpoint(ctx context.Context) (time.Duration, string, error) {
	dir, err := os.MkdirTemp(r.raw.dir, "image-")
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	if err := exec.CommandContext(ctx, r.raw.runsc, append(r.raw.flags(), "checkpoint", "--leave-running", "--image-path", dir, r.id)...).Run(); err != nil {
		return 0, "", fmt.Errorf("runsc checkpoint: %w (see %s)", err, filepath.Join(r.raw.dir, "runsc.log"))
	}
	return time.Since(start), dir, nil
}

// restore times a restore of image into a new container until runsc
// returns, and until a first exec in it ends; then removes both.
func (r *rawCheckpoint) restore(ctx context.Context, image string) (restored, firstExec time.Duration, err error) {
	defer os.RemoveAll(image)
	id := fmt.Sprintf("spacebenchrst%04d%d", r.raw.runs.Add(1), time.Now().UnixNano()%100000)
	flags := r.raw.flags()
	defer exec.Command(r.raw.runsc, append(flags, "delete", "--force", id)...).Run()
	start := time.Now()
	if err := exec.CommandContext(ctx, r.raw.runsc, append(flags, "restore", "--detach", "--background", "--bundle", r.raw.bundle, "--image-path", image, id)...).Run(); err != nil {
		return 0, 0, fmt.Errorf("runsc restore: %w (see %s)", err, filepath.Join(r.raw.dir, "runsc.log"))
	}
	restored = time.Since(start)
	if err := exec.CommandContext(ctx, r.raw.runsc, append(flags, "exec", id, "/bin/true")...).Run(); err != nil {
		return 0, 0, fmt.Errorf("runsc exec in the restored container: %w", err)
	}
	return restored, time.Since(start), nil
}

func (r *rawCheckpoint) close() {
	exec.Command(r.raw.runsc, append(r.raw.flags(), "delete", "--force", r.id)...).Run()
	r.raw.close()
}
