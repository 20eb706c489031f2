package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/client"
)

// desktopImageRoot is the host directory of the image the desktop
// template's default tag runs: <templates>/_images/<image>, a whole root
// filesystem (what its layers made of the base, hard-linked).
func desktopImageRoot(ctx context.Context, c *client.Client, templatesDir string) (string, error) {
	t, err := c.GetTemplate(ctx, DesktopTemplate)
	if err != nil {
		return "", err
	}
	for _, tag := range t.Tags {
		if tag.Tag != "default" {
			continue
		}
		if tag.Image == "" || strings.ContainsAny(tag.Image, "/.") {
			return "", fmt.Errorf("template %s: default tag names image %q", DesktopTemplate, tag.Image)
		}
		root := filepath.Join(templatesDir, "_images", tag.Image)
		if _, err := os.Stat(filepath.Join(root, "opt/space/desktop/start.sh")); err != nil {
			return "", fmt.Errorf("template %s's image on this host: %w", DesktopTemplate, err)
		}
		return root, nil
	}
	return "", fmt.Errorf("template %s has no default tag", DesktopTemplate)
}

// newRawDesktop is the anchor of the desktop's pause and resume: the
// desktop template's own image run by runsc alone (spaced's platform and
// overlay, no network, no agent, nothing encrypted or uploaded). Its start
// command brings up the display, space-desktop and the Xfce session as in a
// sandbox, and Chromium is opened on the bench's page as openChromium does;
// then it is checkpointed and restored as rawCheckpoint does any container.
func newRawDesktop(ctx context.Context, runsc, rootfs string) (_ *rawCheckpoint, err error) {
	uid, gid, err := passwdUser(filepath.Join(rootfs, "etc/passwd"), "user")
	if err != nil {
		return nil, err
	}
	r, err := runRawContainer(ctx, runsc, rootfs, "spacebenchdesk", func(config string) error { return setDesktopProcess(config, uid, gid) })
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	flags := r.raw.flags()
	user := fmt.Sprintf("%d:%d", uid, gid)
	run := func(detach bool, script string) error {
		args := append(flags, "exec", "--user", user, "--cwd", "/home/user",
			"--env", "DISPLAY=:0", "--env", "HOME=/home/user", "--env", "USER=user")
		if detach {
			args = append(args, "--detach")
		}
		return exec.CommandContext(ctx, runsc, append(args, r.id, "/bin/sh", "-c", script)...).Run()
	}
	waitFor := func(what, script string) error {
		deadline := time.Now().Add(2 * time.Minute)
		for run(false, script) != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("raw desktop: %s did not show within 2 minutes", what)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return nil
	}
	if err := waitFor("the Xfce session", "xdotool search --onlyvisible --class xfce4-panel && xdotool search --onlyvisible --class xfdesktop"); err != nil {
		return nil, err
	}
	if err := run(false, "printf '%s' '"+benchPage+"' > /tmp/space-bench-page.html"); err != nil {
		return nil, fmt.Errorf("raw desktop: write the page: %w", err)
	}
	if err := run(true, chromiumCommand); err != nil {
		return nil, fmt.Errorf("raw desktop: start Chromium: %w", err)
	}
	if err := waitFor("Chromium's window", "wmctrl -l | grep -q space-bench-page"); err != nil {
		return nil, err
	}
	// As long as the measured desktop is left before its memory is read.
	time.Sleep(memorySettle)
	return r, nil
}

// setDesktopProcess makes the raw bundle's process the desktop template's
// start command as the template's user, with its environment.
func setDesktopProcess(path string, uid, gid int) error {
	return editSpec(path, func(_, proc map[string]any) {
		proc["args"] = []string{"/opt/space/desktop/start.sh"}
		proc["user"] = map[string]any{"uid": uid, "gid": gid}
		proc["cwd"] = "/home/user"
		proc["env"] = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"DISPLAY=:0", "HOME=/home/user", "USER=user"}
		// start.sh runs space-desktop through sudo, as in a sandbox.
		proc["noNewPrivileges"] = false
	})
}

// passwdUser reads name's uid and gid from a passwd file.
func passwdUser(path, name string) (uid, gid int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 4 || fields[0] != name {
			continue
		}
		if uid, err = strconv.Atoi(fields[2]); err != nil {
			return 0, 0, fmt.Errorf("%s: uid of %s: %w", path, name, err)
		}
		if gid, err = strconv.Atoi(fields[3]); err != nil {
			return 0, 0, fmt.Errorf("%s: gid of %s: %w", path, name, err)
		}
		return uid, gid, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, fmt.Errorf("%s: no user %s", path, name)
}
