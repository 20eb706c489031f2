package e2e

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/test/harness"
)

// Volumes: named, size-limited storage that outlives its sandboxes,
// mounted by several (one writer at a time), on real gVisor sandboxes.

func newVolume(t *testing.T, d *harness.Daemon, sizeMB int) *client.Volume {
	t.Helper()
	name := "v" + harness.RandHex(6)
	v, err := d.Client.CreateVolume(harness.Ctx(t, time.Minute), client.CreateVolumeRequest{Name: name, SizeMB: sizeMB})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func withVolume(t *testing.T, d *harness.Daemon, mounts ...client.VolumeMount) (*client.Sandbox, error) {
	t.Helper()
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600, Volumes: mounts})
	if err == nil {
		t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID) })
	}
	return sb, err
}

func mustVolume(t *testing.T, d *harness.Daemon, mounts ...client.VolumeMount) *client.Sandbox {
	t.Helper()
	sb, err := withVolume(t, d, mounts...)
	if err != nil {
		t.Fatalf("create with volumes %+v: %v", mounts, err)
	}
	return sb
}

func mustVolumeSnapshot(t *testing.T, d *harness.Daemon, snap string) *client.Sandbox {
	t.Helper()
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{Snapshot: snap, TimeoutSeconds: 600})
	if err != nil {
		t.Fatalf("create from snapshot %s: %v", snap, err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID) })
	return sb
}

func readVolume(t *testing.T, d *harness.Daemon, vol, path string) string {
	t.Helper()
	rc, err := d.Client.ReadVolumeFile(harness.Ctx(t, 30*time.Second), vol, path)
	if err != nil {
		t.Fatalf("read %s from volume %s: %v", path, vol, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestVolumeSharedBySandboxes(t *testing.T) {
	d := need(t)
	ctx := harness.Ctx(t, 3*time.Minute)
	v := newVolume(t, d, 32)
	writer := mustVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/mnt/data"})
	if len(writer.Volumes) != 1 || writer.Volumes[0].VolumeID != v.ID {
		t.Fatalf("sandbox volumes %+v", writer.Volumes)
	}
	// The default user owns a new volume's root.
	sh(t, d, writer.ID, "echo hello > /mnt/data/a.txt && mkdir -p /mnt/data/dir && echo deep > /mnt/data/dir/b.txt")

	reader := mustVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/data", ReadOnly: true})
	if got := sh(t, d, reader.ID, "cat /data/a.txt /data/dir/b.txt"); got != "hello\ndeep\n" {
		t.Fatalf("the reader sees %q", got)
	}
	if r := run(t, d, reader.ID, client.CommandRequest{Cmd: "touch /data/nope"}); r.Exit.Code() == 0 {
		t.Fatal("a read-only mount took a write")
	}
	// The reader sees the writer's later writes (shared file access).
	sh(t, d, writer.ID, "echo again >> /mnt/data/a.txt")
	if got := sh(t, d, reader.ID, "cat /data/a.txt"); got != "hello\nagain\n" {
		t.Fatalf("the reader does not see a later write: %q", got)
	}

	// One writer at a time: a second read-write mount is a 409 naming it.
	_, err := withVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/w"})
	if !client.IsFailedPrecondition(err) || !strings.Contains(err.Error(), writer.ID) {
		t.Fatalf("a second writer: %v", err)
	}
	got, err := d.Client.GetVolume(ctx, v.Name)
	if err != nil || len(got.Mounts) != 2 {
		t.Fatalf("volume mounts: %+v %v", got, err)
	}
	if err := d.Client.DeleteVolume(ctx, v.ID); !client.IsFailedPrecondition(err) {
		t.Fatalf("delete in use: %v", err)
	}

	// The content API and the sandbox see the same files.
	if _, err := d.Client.WriteVolumeFile(ctx, v.Name, "/from-host.txt", strings.NewReader("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, d, writer.ID, "cat /mnt/data/from-host.txt; stat -c '%a %U' /mnt/data/from-host.txt"); got != "host600 user\n" {
		t.Fatalf("the sandbox sees %q", got)
	}
	if got := readVolume(t, d, v.ID, "dir/b.txt"); got != "deep\n" {
		t.Fatalf("the content API reads %q", got)
	}

	// The size limit: ENOSPC in the sandbox, and the sandbox goes on.
	r := run(t, d, writer.ID, client.CommandRequest{Cmd: "dd if=/dev/zero of=/mnt/data/big bs=1M count=64"})
	if r.Exit.Code() == 0 || !strings.Contains(r.Stderr, "No space left") {
		t.Fatalf("64 MB into a 32 MB volume: exit %+v, stderr %q", *r.Exit, r.Stderr)
	}
	if got, _ := d.Client.GetVolume(ctx, v.ID); got.UsedBytes < 24<<20 {
		t.Fatalf("used %d after filling it", got.UsedBytes)
	}
	sh(t, d, writer.ID, "rm /mnt/data/big; df -k /mnt/data | tail -1")
	if _, err := d.Client.WriteVolumeFile(ctx, v.ID, "/big2", strings.NewReader(strings.Repeat("x", 40<<20)), 0); client.ErrorStatus(err) != 507 {
		t.Fatalf("a 40 MB upload into a 32 MB volume: %v", err)
	}

	// The data outlives its sandboxes.
	for _, id := range []string{writer.ID, reader.ID} {
		if err := d.Client.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	next := mustVolume(t, d, client.VolumeMount{Name: v.ID, Path: "/home/user/work"})
	if got := sh(t, d, next.ID, "cat /home/user/work/a.txt"); got != "hello\nagain\n" {
		t.Fatalf("after its sandboxes ended: %q", got)
	}
	if err := d.Client.KillSandbox(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	if left := d.Leftovers(next.ID); len(left) > 0 {
		t.Errorf("leftovers: %v", left)
	}
	if err := d.Client.DeleteVolume(ctx, v.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.GetVolume(ctx, v.Name); !client.IsNotFound(err) {
		t.Fatalf("a deleted volume: %v", err)
	}
}

func TestVolumeMountRefusals(t *testing.T) {
	d := need(t)
	v := newVolume(t, d, 16)
	defer d.Client.DeleteVolume(harness.Ctx(t, time.Minute), v.ID)
	for path, why := range map[string]string{
		"/":                    "whole filesystem",
		"/proc":                "/proc",
		"/sys/kernel":          "/sys",
		"/dev":                 "/dev",
		"/usr/local/bin":       "space agent",
		"/usr":                 "space agent",
		"/bin":                 "programs",
		"/lib":                 "libraries",
		"/lib64":               "libraries",
		"/etc":                 "configuration",
		"/run":                 "runtime state",
		"/var":                 "/var/run",
		"mnt/data":             "absolute",
		"/mnt/../etc":          "clean",
		"/home/user/../../etc": "clean",
		"/mnt/data/":           "clean",
		"/home/user/./x":       "clean",
	} {
		_, err := withVolume(t, d, client.VolumeMount{Name: v.Name, Path: path})
		if !client.IsInvalidArgument(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("mount at %q: %v, want a 400 saying %q", path, err, why)
		}
	}
	for what, mounts := range map[string][]client.VolumeMount{
		"overlapping paths": {{Name: v.Name, Path: "/a", ReadOnly: true}, {Name: v.Name, Path: "/a/b", ReadOnly: true}},
		"a volume twice":    {{Name: v.Name, Path: "/a", ReadOnly: true}, {Name: v.Name, Path: "/b", ReadOnly: true}},
		"a bad name":        {{Name: "../x", Path: "/a"}},
	} {
		if _, err := withVolume(t, d, mounts...); !client.IsInvalidArgument(err) {
			t.Errorf("%s: %v", what, err)
		}
	}
	if _, err := withVolume(t, d, client.VolumeMount{Name: "nosuchvolume", Path: "/a"}); !client.IsNotFound(err) {
		t.Errorf("an unknown volume: %v", err)
	}
	// No refusal names a host path.
	_, err := withVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/etc"})
	if strings.Contains(err.Error(), d.DataDir) {
		t.Errorf("an error names the data dir: %v", err)
	}
}

func TestVolumePauseResumeFork(t *testing.T) {
	d := need(t)
	ctx := harness.Ctx(t, 4*time.Minute)
	v := newVolume(t, d, 128)
	sb := mustVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/work"})
	// 64 MB the checkpoint must not hold, and a process writing to the
	// volume through the pause.
	sh(t, d, sb.ID, "dd if=/dev/urandom of=/work/blob bs=1M count=64 2>/dev/null && "+
		"(nohup sh -c 'while true; do echo tick >> /work/log; sleep 0.1; done' >/dev/null 2>&1 &) && sleep 0.5")

	// A read-only holder forks; the writer does not.
	ro := mustVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/ro", ReadOnly: true})
	forks, err := d.Client.ForkSandbox(ctx, ro.ID, 1)
	if err != nil {
		t.Fatalf("fork of a read-only holder: %v", err)
	}
	if got := sh(t, d, forks[0].ID, "test -s /ro/log && echo ok"); got != "ok\n" {
		t.Fatalf("the fork does not see the volume: %q", got)
	}
	// A full snapshot keeps the mounts (not the contents): a sandbox made
	// from it mounts the volume again, under the same rule.
	snap, err := d.Client.TakeSnapshotWith(ctx, ro.ID, client.SnapshotOptions{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Client.DeleteSnapshot(ctx, snap.ID)
	fromSnap := mustVolumeSnapshot(t, d, snap.ID)
	if len(fromSnap.Volumes) != 1 || !fromSnap.Volumes[0].ReadOnly || sh(t, d, fromSnap.ID, "test -s /ro/log && echo ok") != "ok\n" {
		t.Fatalf("a sandbox from a full snapshot of a volume holder: %+v", fromSnap.Volumes)
	}
	for _, id := range []string{forks[0].ID, ro.ID, fromSnap.ID} {
		d.Client.KillSandbox(ctx, id)
	}
	if _, err := d.Client.ForkSandbox(ctx, sb.ID, 1); !client.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "read-write") {
		t.Fatalf("fork of a read-write holder: %v", err)
	}
	wsnap, err := d.Client.TakeSnapshotWith(ctx, sb.ID, client.SnapshotOptions{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Client.DeleteSnapshot(ctx, wsnap.ID)
	if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: wsnap.ID}); !client.IsFailedPrecondition(err) {
		t.Fatalf("a second writer from a full snapshot of the writer: %v", err)
	}
	if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: wsnap.ID, Volumes: []client.VolumeMount{{Name: v.Name, Path: "/x", ReadOnly: true}}}); !client.IsInvalidArgument(err) {
		t.Fatalf("volumes with a full snapshot: %v", err)
	}

	p, err := d.Client.PauseSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Checkpoint == nil || p.Checkpoint.Bytes >= 64<<20 {
		t.Fatalf("the checkpoint holds %+v bytes: the volume's 64 MB went into it", p.Checkpoint)
	}
	t.Logf("checkpoint of a sandbox with 64 MB in its volume: %d bytes", p.Checkpoint.Bytes)
	lines := strings.Count(readVolume(t, d, v.ID, "/log"), "\n")
	// Paused, it still holds the volume.
	if _, err := withVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/w"}); !client.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("a writer beside a paused one: %v", err)
	}
	if err := d.Client.DeleteVolume(ctx, v.ID); !client.IsFailedPrecondition(err) {
		t.Fatalf("delete while its sandbox is paused: %v", err)
	}
	if _, err := d.Client.WriteVolumeFile(ctx, v.ID, "/while-paused", strings.NewReader("meanwhile"), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := strings.Count(readVolume(t, d, v.ID, "/log"), "\n"); n != lines {
		t.Fatalf("the paused sandbox wrote %d lines", n-lines)
	}

	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(5*time.Second, func() bool {
		return strings.Count(readVolume(t, d, v.ID, "/log"), "\n") > lines+2
	}) {
		t.Fatal("the resumed process does not write to the volume")
	}
	if got := sh(t, d, sb.ID, "cat /work/while-paused; md5sum < /work/blob | cut -c1-8"); !strings.HasPrefix(got, "meanwhile") {
		t.Fatalf("after resume: %q", got)
	}

	// A file the sandbox holds open in the volume, removed while it is
	// paused, makes its resume fail (409, saying so) and leaves it paused;
	// put back, the resume works.
	sh(t, d, sb.ID, "(nohup sh -c 'exec 3>>/work/held; while true; do echo x >&3; sleep 0.1; done' >/dev/null 2>&1 &) && sleep 0.3")
	if _, err := d.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Client.RemoveVolumeFile(ctx, v.ID, "/held"); err != nil {
		t.Fatal(err)
	}
	_, err = d.Client.ResumeSandbox(ctx, sb.ID, 600)
	if !client.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "volumes was removed") {
		t.Fatalf("resume without a file it held open: %v", err)
	}
	if got, err := d.Client.GetSandbox(ctx, sb.ID); err != nil || got.State != "paused" {
		t.Fatalf("after the failed resume: %+v %v", got, err)
	}
	if _, err := d.Client.WriteVolumeFile(ctx, v.ID, "/held", strings.NewReader(""), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume once the file is back: %v", err)
	}

	// A pause that keeps the disk only boots afresh, with the volume.
	if _, err := d.Client.PauseSandboxWith(ctx, sb.ID, client.PauseOptions{DiskOnly: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, d, sb.ID, "cat /work/while-paused"); got != "meanwhile" {
		t.Fatalf("after a disk-only resume: %q", got)
	}
	if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Client.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
}

// A restart of spaced keeps volumes mounted and sandboxes writing to them,
// and every claim stands.
func TestVolumeAcrossRestart(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "volrestart", CIDR: "10.241.152.0/22", NoPool: true})
	ctx := harness.Ctx(t, 3*time.Minute)
	v := newVolume(t, d, 32)
	sb := mustVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/work"})
	sh(t, d, sb.ID, "(nohup sh -c 'while true; do echo tick >> /work/log; sleep 0.1; done' >/dev/null 2>&1 &) && sleep 0.3")
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(readVolume(t, d, v.ID, "/log"), "\n")
	if !harness.WaitFor(5*time.Second, func() bool { return strings.Count(readVolume(t, d, v.ID, "/log"), "\n") > before+2 }) {
		t.Fatal("the sandbox no longer writes to its volume after the restart")
	}
	got, err := d.Client.GetVolume(ctx, v.Name)
	if err != nil || len(got.Mounts) != 1 || got.Mounts[0].SandboxID != sb.ID {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := withVolume(t, d, client.VolumeMount{Name: v.Name, Path: "/w"}); !client.IsFailedPrecondition(err) {
		t.Fatalf("a second writer after the restart: %v", err)
	}
	if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.Client.DeleteVolume(ctx, v.Name); err != nil {
		t.Fatal(err)
	}
}

// A volume lives on one node; its backup in the object store makes it on
// another, and a sandbox paused on the first resumes on the second with
// the second's volume of the same name.
func TestVolumeBackupToAnotherNode(t *testing.T) {
	harness.Need(t)
	s3 := blobstoretest.StartVersity(t)
	keyFile := filepath.Join(t.TempDir(), "platform.json")
	a := ownDaemon(t, harness.Options{Name: "vola", CIDR: "10.241.156.0/22", NoPool: true, Env: s3Env(s3, keyFile)})
	b := ownDaemon(t, harness.Options{Name: "volb", CIDR: "10.241.252.0/22", NoPool: true, Env: s3Env(s3, keyFile)})
	ctx := harness.Ctx(t, 4*time.Minute)
	v := newVolume(t, a, 64)
	marker := randMarker()
	sb := mustVolume(t, a, client.VolumeMount{Name: v.Name, Path: "/work"})
	sh(t, a, sb.ID, "mkdir -p /work/d && printf "+marker+" > /work/d/marker && ln -s /etc/hostname /work/link && "+
		"(nohup sh -c 'while true; do echo tick >> /work/log; sleep 0.05; done' >/dev/null 2>&1 &) && "+
		"for i in $(seq 50); do test -s /work/log && break; sleep 0.05; done")
	// Backed up while its sandbox writes (the filesystem is frozen for the copy).
	bk, err := a.Client.BackupVolume(ctx, v.Name)
	if err != nil {
		t.Fatal(err)
	}
	if bk.Files < 4 || bk.Volume != v.Name {
		t.Fatalf("backup %+v", bk)
	}
	if hits := atRest(s3, []byte(marker)); len(hits) > 0 {
		t.Fatalf("the marker is stored in plain text: %v", hits)
	}
	sh(t, a, sb.ID, "echo still-writable > /work/after")

	list, err := b.Client.ListVolumeBackups(ctx, v.Name)
	if err != nil || len(list) != 1 || list[0].ID != bk.ID {
		t.Fatalf("backups seen from the second node: %+v %v", list, err)
	}
	moved, err := b.Client.CreateVolume(ctx, client.CreateVolumeRequest{Name: v.Name, FromBackup: bk.ID})
	if err != nil {
		t.Fatal(err)
	}
	if moved.SizeMB != 64 || moved.RestoredFrom != bk.ID {
		t.Fatalf("restored volume %+v", moved)
	}
	// A paused sandbox of the first node resumes on the second, with the
	// second's volume of that name mounted where it was.
	if _, err := a.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if left := a.LeftoversAfter(sb.ID, 10*time.Second); len(left) > 0 { // b shares this host
		t.Fatalf("a paused sandbox holds host resources: %v", left)
	}
	if _, err := b.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume on the second node: %v", err)
	}
	defer b.Client.KillSandbox(ctx, sb.ID)
	if got := sh(t, b, sb.ID, "cat /work/d/marker; readlink /work/link"); got != marker+"/etc/hostname\n" {
		t.Fatalf("on the second node: %q", got)
	}
	lines := strings.Count(readVolume(t, b, moved.ID, "/log"), "\n")
	if !harness.WaitFor(5*time.Second, func() bool { return strings.Count(readVolume(t, b, moved.ID, "/log"), "\n") > lines+2 }) {
		t.Fatal("the resumed process does not write to the second node's volume")
	}
	if _, err := b.Client.StatVolumeFile(ctx, v.Name, "/after"); !client.IsNotFound(err) {
		t.Fatalf("a write after the backup reached the restored volume: %v", err)
	}
	if err := b.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// The first node's paused record still holds its volume until killed.
	if err := a.Client.DeleteVolume(ctx, v.Name); !client.IsFailedPrecondition(err) {
		t.Fatalf("delete on the first node while its record is paused: %v", err)
	}
	a.Client.KillSandbox(ctx, sb.ID)
	for _, n := range []*harness.Daemon{a, b} {
		if err := n.Client.DeleteVolume(ctx, v.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Client.DeleteVolumeBackup(ctx, bk.ID); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeCLI drives space volume and space create --volume.
func TestVolumeCLI(t *testing.T) {
	d := need(t)
	space := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(harness.Ctx(t, time.Minute), harness.Bin(t, "space"), args...)
		cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+d.APIKey)
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	name := "cli" + harness.RandHex(4)
	out, e, code := space("", "volume", "create", name, "--size", "16")
	if code != 0 || !strings.HasPrefix(out, "vol-") {
		t.Fatalf("space volume create: %d %q %q", code, out, e)
	}
	defer d.Client.DeleteVolume(harness.Ctx(t, time.Minute), name)
	if _, e, code := space("from stdin", "volume", "cp", "-", name+":/in.txt"); code != 0 {
		t.Fatalf("space volume cp in: %d %s", code, e)
	}
	out, e, code = space("", "create", "--volume", name+":/data:ro")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("space create --volume: %d %s", code, e)
	}
	defer d.Client.KillSandbox(harness.Ctx(t, time.Minute), id)
	if out, _, _ := space("", "exec", id, "--", "cat /data/in.txt"); out != "from stdin" {
		t.Fatalf("the sandbox reads %q", out)
	}
	if out, _, _ := space("", "volume", "ls"); !strings.Contains(out, name) || !strings.Contains(out, id+":ro") {
		t.Fatalf("space volume ls: %s", out)
	}
	if out, _, _ := space("", "volume", "cp", name+":/in.txt", "-"); out != "from stdin" {
		t.Fatalf("space volume cp out: %q", out)
	}
	if _, e, code := space("", "volume", "rm", name); code == 0 || !strings.Contains(e, "mounted by sandbox") {
		t.Fatalf("space volume rm in use: %d %s", code, e)
	}
	if _, e, code := space("", "create", "--volume", name+":/etc"); code == 0 || !strings.Contains(e, "/etc") {
		t.Fatalf("space create --volume at /etc: %d %s", code, e)
	}
}
