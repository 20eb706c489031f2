package template

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/sandbox"
)

// A template's start command runs at the end of its build in a sandbox of
// the finished image. Once its ready check passes, the sandbox is
// checkpointed (memory, processes, disk): sandboxes of the template
// restore that checkpoint instead of booting, so the server is already
// listening when their create answers. The checkpoint is stored under a
// key of the image, the command and its check, the agent and the engine
// (a checkpoint restores only into the engine that took it); a rebuild
// that changes none of them reuses it.

// readyPoll is how often the ready check runs while the start command
// comes up.
const readyPoll = 200 * time.Millisecond

// startedNoCheck is how long a start command without a ready check must
// run to count as started.
const startedNoCheck = time.Second

// started runs the start command on img and checkpoints it once ready,
// unless its checkpoint is cached; it returns the checkpoint's key.
func (r *run) started(ctx context.Context, img imageRef, st recipe.Start) (string, error) {
	step := len(r.rec.Steps) + 1
	skey := recipe.StartKey(r.key, st, r.svc.im.agent.digest, r.svc.cfg.Engine)
	r.pin(startID(skey))
	if !r.force {
		if ok, err := r.svc.hasStart(ctx, skey); err != nil {
			return "", r.fail(step, err, "start command: %s", errdefs.PublicMessage(err))
		} else if ok {
			r.log.cached(step, "start command: %s (cached)", st.Cmd)
			return skey, nil
		}
	}
	r.log.add("info", step, "start command: %s", st.Cmd)
	box, err := r.box(ctx, img, r.config)
	if err != nil {
		return "", r.fail(step, err, "the start command's sandbox did not start: %s", errdefs.PublicMessage(err))
	}
	defer box.Close(ctx)

	// The command runs until the checkpoint; its output goes to the log
	// until then.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	type exit struct {
		code int
		err  error
	}
	exited := make(chan exit, 1)
	lines := &lineWriter{emit: func(stderr bool, line string) { r.log.add("info", step, "%s", line) }}
	go func() {
		code, err := box.Run(runCtx, sandbox.Exec{Argv: []string{"/bin/sh", "-c", st.Cmd}, Cwd: r.config.Workdir}, lines.write)
		exited <- exit{code, err}
	}()
	began := time.Now()
	deadline := time.NewTimer(st.Ready.Timeout())
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	// A start command that ends with 0 before it is ready (a daemon that
	// forks, E2B's test_build_template's "echo"), is not a failure: the
	// ready check decides, as in E2B's builds. Any other end is.
	running := exited
	for ready := false; !ready; {
		select {
		case e := <-running:
			if e.err == nil && e.code == 0 {
				running = nil
				continue
			}
			lines.flush()
			code := e.code
			se := &stepErr{step: step, msg: fmt.Sprintf("the start command exited with code %d before it was ready", code), cause: e.err, exitCode: &code}
			if e.err != nil {
				se.msg = "the start command failed before it was ready: " + errdefs.PublicMessage(e.err)
			}
			return "", se
		case <-deadline.C:
			return "", r.fail(step, nil, "the start command was not ready within %s (ready check: %s)", st.Ready.Timeout(), describeReady(st.Ready))
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
			var err error
			if ready, err = r.ready(ctx, box, st.Ready, began); err != nil {
				return "", r.fail(step, err, "start command: ready check: %s", errdefs.PublicMessage(err))
			}
		}
	}
	r.log.add("info", step, "ready after %s; checkpointing the running sandbox", time.Since(began).Round(time.Millisecond))
	// Close our stream to the command first: the checkpoint should hold
	// no connection to this node (the command goes on inside).
	stopRun()
	if running != nil {
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
	}
	lines.flush()

	dir, err := r.svc.startDir(skey, true)
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp-" + randHex(4)
	defer os.RemoveAll(tmp)
	token, err := box.Checkpoint(ctx, tmp)
	if err != nil {
		return "", r.fail(step, err, "checkpoint of the started template: %s", errdefs.PublicMessage(err))
	}
	box.Close(ctx)
	stored, err := r.svc.art.saveStart(ctx, skey, tmp, token)
	if err != nil {
		return "", r.fail(step, err, "store the started template: %s", errdefs.PublicMessage(err))
	}
	unlock := r.svc.starts.Lock(skey)
	err = r.svc.keepStart(tmp, dir, token)
	unlock()
	if err != nil {
		return "", err
	}
	r.log.add("info", step, "started template stored (%s)", size(stored))
	return skey, nil
}

// readyCheckBound is how long one ready check may run before it counts as
// not ready yet.
const readyCheckBound = 10 * time.Second

// sleepCheck is a ready command that only waits: E2B's wait_for_timeout(ms)
// sends "sleep N".
var sleepCheck = regexp.MustCompile(`^sleep ([0-9]{1,5})$`)

// checkBound is how long one run of the ready command script may take: a
// command that sleeps N seconds gets them on top, else it could never end
// within the bound and the build would wait for the ready timeout.
func checkBound(script string) time.Duration {
	if m := sleepCheck.FindStringSubmatch(strings.TrimSpace(script)); m != nil {
		n, _ := strconv.Atoi(m[1])
		return time.Duration(n)*time.Second + readyCheckBound
	}
	return readyCheckBound
}

// ready runs the ready check once.
func (r *run) ready(ctx context.Context, box *sandbox.BuildBox, rd recipe.Ready, began time.Time) (bool, error) {
	check := func(script string, args ...string) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, checkBound(script))
		defer cancel()
		code, err := box.Run(cctx, sandbox.Exec{Argv: append([]string{"/bin/sh", "-c", script, "ready"}, args...), Cwd: r.config.Workdir}, nil)
		if err != nil && cctx.Err() != nil && ctx.Err() == nil {
			return false, nil // a check that hangs is not ready yet
		}
		return err == nil && code == 0, err
	}
	switch {
	case rd.Cmd != "":
		return check(rd.Cmd)
	case rd.File != "":
		return check(`test -e "$1"`, rd.File)
	case rd.URL != "":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		code, err := box.Run(cctx, sandbox.Exec{Argv: []string{"/bin/sh", "-c", urlCheck, "ready", rd.URL}, Cwd: r.config.Workdir}, nil)
		switch {
		case err != nil && cctx.Err() != nil && ctx.Err() == nil:
			return false, nil
		case err != nil:
			return false, err
		case code == urlCheckNoClient:
			return false, errdefs.New(errdefs.ErrInvalidArgument, "the image has none of curl, python3 or wget to GET %s with: install one, or use a port or command ready check", rd.URL)
		}
		return code == 0, nil
	case rd.Port != 0:
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			data, err := box.ReadFile(ctx, f, 4<<20)
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return false, err
			}
			if listening(data, rd.Port) {
				return true, nil
			}
		}
		return false, nil
	}
	return time.Since(began) >= startedNoCheck, nil
}

// urlCheck GETs $1 inside the sandbox with whatever client the image
// has and exits 0 only when the answer is 200 itself: another 2xx, a
// redirect (not followed, as E2B's waitForURL does not) or an error is not
// ready. It exits urlCheckNoClient when the image has no client at all.
const urlCheck = `url=$1
if command -v curl >/dev/null 2>&1; then
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url" 2>/dev/null)" = 200 ]
elif command -v python3 >/dev/null 2>&1; then
  python3 -c "$(printf '%s\n' 'import sys, urllib.request as u' 'class R(u.HTTPRedirectHandler):' '    redirect_request = lambda *a, **k: None' 'try: sys.exit(u.build_opener(R).open(sys.argv[1], timeout=5).status != 200)' 'except Exception: sys.exit(1)')" "$url" 2>/dev/null
elif command -v wget >/dev/null 2>&1; then
  # -S prints each response's status line; the first is the URL's own.
  [ "$(wget -S -O /dev/null "$url" 2>&1 | sed -n 's/^ *HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' | head -n 1)" = 200 ]
else
  exit 99
fi`

// urlCheckNoClient is urlCheck's exit code when the image has none of
// curl, python3 and wget.
const urlCheckNoClient = 99

// listening reports whether a /proc/net/tcp table has a socket in LISTEN
// state (0A) on port.
func listening(table []byte, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, line := range bytes.Split(table, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}

func describeReady(rd recipe.Ready) string {
	switch {
	case rd.Cmd != "":
		return "command " + strconv.Quote(rd.Cmd)
	case rd.Port != 0:
		return fmt.Sprintf("port %d listening", rd.Port)
	case rd.URL != "":
		return "GET " + rd.URL
	case rd.File != "":
		return "file " + rd.File
	}
	return "the command keeps running"
}
