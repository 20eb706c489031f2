package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

// CheckpointConfig sizes the pause/resume benchmark.
type CheckpointConfig struct {
	// Runs is how many pause+resume cycles per size.
	Runs int
	// SizesMiB are the memory states to hold: 0 is an idle sandbox.
	SizesMiB []int
	// Runsc and RootFS, when set, add the raw runsc anchor (root only).
	Runsc, RootFS string
	Log           io.Writer
}

// CheckpointFigures are the medians for one memory size.
type CheckpointFigures struct {
	SizeMiB int `json:"state_mib"`
	// PauseP50 is POST .../pause until it answers: freeze, checkpoint,
	// encrypt and upload, record (the teardown runs after the answer).
	PauseP50 float64 `json:"pause_p50_ms"`
	// ResumeP50 is POST .../resume until the agent answers: download,
	// decrypt, restore.
	ResumeP50 float64 `json:"resume_p50_ms"`
	// ResumeToExecP50 adds running `true` in the resumed sandbox.
	ResumeToExecP50 float64 `json:"resume_to_exec_p50_ms"`
	// CheckpointMiB is the stored (encrypted) size of one checkpoint.
	CheckpointMiB float64 `json:"checkpoint_mib"`
	// The anchors (rawCheckpoint), measured between the runs above:
	// runsc checkpoint --leave-running of a container holding the same
	// memory, restore of that image until runsc returns and until a first
	// exec ends; and the ratios of pause and resume-to-exec to them.
	RawCheckpointP50  float64 `json:"raw_checkpoint_p50_ms,omitempty"`
	RawRestoreP50     float64 `json:"raw_restore_p50_ms,omitempty"`
	RawRestoreExecP50 float64 `json:"raw_restore_to_exec_p50_ms,omitempty"`
	PauseRatio        float64 `json:"pause_ratio,omitempty"`
	ResumeRatio       float64 `json:"resume_ratio,omitempty"`
}

// holdMemory keeps size MiB of incompressible memory, then waits.
const holdMemory = `import os, sys, time
hold = bytearray(os.urandom(1 << 20)) * int(sys.argv[1])
open("/tmp/held", "w").write("ok")
while True:
    time.sleep(1)
`

// Checkpoints measures pause and resume of sandboxes holding each size of
// memory state.
func Checkpoints(ctx context.Context, c *client.Client, cfg CheckpointConfig) ([]CheckpointFigures, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	var out []CheckpointFigures
	for _, size := range cfg.SizesMiB {
		fmt.Fprintf(cfg.Log, "bench: %d pause+resume cycles holding %d MiB\n", cfg.Runs, size)
		f, err := checkpointSize(ctx, c, cfg, size)
		if err != nil {
			return nil, fmt.Errorf("checkpoint of %d MiB: %w", size, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// resumeAfter is how long the bench leaves a sandbox paused: users resume
// later, and a pause tears its sandbox down after it answers (a resume at
// once waits for that).
const resumeAfter = 500 * time.Millisecond

func checkpointSize(ctx context.Context, c *client.Client, cfg CheckpointConfig, sizeMiB int) (CheckpointFigures, error) {
	f := CheckpointFigures{SizeMiB: sizeMiB}
	var raw *rawCheckpoint
	if cfg.Runsc != "" {
		var err error
		if raw, err = newRawCheckpoint(ctx, cfg.Runsc, cfg.RootFS, sizeMiB); err != nil {
			return f, fmt.Errorf("raw runsc anchor: %w", err)
		}
		defer raw.close()
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3600, MemoryMB: max(512, sizeMiB*2+256)})
	if err != nil {
		return f, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	if sizeMiB > 0 {
		if _, err := c.Upload(ctx, sb.ID, "/tmp/hold.py", strings.NewReader(holdMemory)); err != nil {
			return f, err
		}
		cmd := fmt.Sprintf("nohup python3 /tmp/hold.py %d >/dev/null 2>&1 & for i in $(seq 600); do [ -e /tmp/held ] && exit 0; sleep 0.1; done; exit 1", sizeMiB)
		if err := runToEnd(ctx, c, sb.ID, cmd); err != nil {
			return f, fmt.Errorf("hold memory: %w", err)
		}
	}
	var pause, resume, toExec, rawCkpt, rawRestore, rawExec Sample
	var bytes int64
	for range cfg.Runs {
		start := time.Now()
		p, err := c.PauseSandbox(ctx, sb.ID)
		if err != nil {
			return f, err
		}
		pause = append(pause, time.Since(start))
		if p.Checkpoint != nil {
			bytes = int64(p.Checkpoint.Bytes)
		}
		time.Sleep(resumeAfter)
		start = time.Now()
		if _, err := c.ResumeSandbox(ctx, sb.ID, 3600); err != nil {
			return f, err
		}
		resume = append(resume, time.Since(start))
		if err := runToEnd(ctx, c, sb.ID, "true"); err != nil {
			return f, err
		}
		toExec = append(toExec, time.Since(start))
		if raw == nil {
			continue
		}
		d, image, err := raw.checkpoint(ctx)
		if err != nil {
			return f, err
		}
		restored, first, err := raw.restore(ctx, image)
		if err != nil {
			return f, err
		}
		rawCkpt, rawRestore, rawExec = append(rawCkpt, d), append(rawRestore, restored), append(rawExec, first)
	}
	f.PauseP50, f.ResumeP50, f.ResumeToExecP50 = pause.Percentile(50), resume.Percentile(50), toExec.Percentile(50)
	f.CheckpointMiB = float64(bytes*100>>20) / 100
	if raw != nil {
		f.RawCheckpointP50, f.RawRestoreP50, f.RawRestoreExecP50 = rawCkpt.Percentile(50), rawRestore.Percentile(50), rawExec.Percentile(50)
		f.PauseRatio = f.PauseP50 / f.RawCheckpointP50
		f.ResumeRatio = f.ResumeToExecP50 / f.RawRestoreExecP50
	}
	return f, nil
}
