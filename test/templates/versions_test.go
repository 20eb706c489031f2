package templates

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestVersions: tags point at ready builds; a build id pins one; a
// sandbox keeps the image it was made from through new builds and the
// template's deletion; deleting a template in use frees its name at once
// and its images once its sandboxes end (collected), and every layer goes
// from the object store once no template needs it.
func TestVersions(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "versions", CIDR: "10.247.28.0/22",
		Env: []string{"SPACE_TEMPLATE_CACHE_TTL=1s", "SPACE_TEMPLATE_GC_INTERVAL=1s"}})
	ctx := harness.Ctx(t, 5*time.Minute)
	step := func(v string) client.BuildRequest {
		return client.BuildRequest{Name: "ver:" + v, From: &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{Run: "echo " + v + " > /home/user/version"}}}
	}
	v1 := mustBuild(t, d, "", step("v1"))
	// The only layer in the object store is v1's one step: its build's
	// size is that layer's, as stored.
	if got, want := v1.Bytes, storedBytes(t, d); got != want || got <= 0 {
		t.Errorf("build v1: %d bytes, the object store holds %d", got, want)
	}
	a := d.NewSandbox(t, client.CreateSandboxRequest{Template: "ver:v1"})
	v2 := mustBuild(t, d, "", step("v2"))
	if v1.Image == v2.Image {
		t.Fatal("two different builds made the same image")
	}
	// Three tags on two builds: each layer once.
	if tpl, err := d.Client.GetTemplate(ctx, "ver"); err != nil || tpl.Bytes != storedBytes(t, d) || tpl.LocalBytes <= 0 {
		t.Errorf("template ver: %+v (%v), the object store holds %d bytes", tpl, err, storedBytes(t, d))
	}
	version := func(id string) string { return strings.TrimSpace(sh(t, d, id, "", "cat /home/user/version")) }

	// Only named tags: "ver" alone (ver:default) does not exist yet.
	if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "ver"}); !client.IsNotFound(err) {
		t.Errorf("create of ver with no default tag: %v, want 404", err)
	}
	if _, err := d.Client.SetTag(ctx, "ver", "default", "", "ver:v2"); err != nil {
		t.Fatal(err)
	}
	// A tag of another template pointed at a build of ver: 400, and
	// neither template changed.
	other := mustBuild(t, d, "", client.BuildRequest{Name: "other", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{{Run: "echo other > /home/user/version"}}})
	for _, target := range [][2]string{{v1.ID, ""}, {"", "ver:v1"}} {
		_, err := d.Client.SetTag(ctx, "other", "stolen", target[0], target[1])
		if client.ErrorStatus(err) != 400 || !strings.Contains(err.Error(), "is of template ver") {
			t.Errorf("tag of other from %v: %v, want 400", target, err)
		}
	}
	for name, want := range map[string]int{"other": 1, "ver": 3} {
		if tpl, err := d.Client.GetTemplate(ctx, name); err != nil || len(tpl.Tags) != want {
			t.Errorf("after refused tags %s has %+v (%v), want %d tags", name, tpl, err, want)
		}
	}
	if err := d.Client.DeleteTemplate(ctx, other.Template); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]string{"ver": "v2", "ver:v2": "v2", "ver:" + v1.ID: "v1"} {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: ref})
		if got := version(sb.ID); got != want {
			t.Errorf("a sandbox of %s has %s, want %s", ref, got, want)
		}
	}
	tpl, err := d.Client.GetTemplate(ctx, "ver")
	if err != nil {
		t.Fatal(err)
	}
	if len(tpl.Tags) != 3 || tpl.Bytes <= 0 || tpl.Sandboxes < 4 {
		t.Errorf("template ver: %d tags, %d bytes, %d sandboxes", len(tpl.Tags), tpl.Bytes, tpl.Sandboxes)
	}
	if err := d.Client.DeleteTag(ctx, "ver", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "ver:v2"}); !client.IsNotFound(err) {
		t.Errorf("create of a removed tag: %v, want 404", err)
	}

	// Deleted while sandboxes run: the name is gone, they run on.
	if err := d.Client.DeleteTemplate(ctx, "ver"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "ver:v1"}); !client.IsNotFound(err) {
		t.Errorf("create of a deleted template: %v, want 404", err)
	}
	time.Sleep(3 * time.Second) // collections run every second
	if got := version(a.ID); got != "v1" {
		t.Errorf("after the delete the old sandbox has %q", got)
	}
	images := filepath.Join(d.Opts.TemplatesDir, "_images")
	if _, err := os.Stat(filepath.Join(images, v1.Image)); err != nil {
		t.Errorf("the image of a running sandbox was collected: %v", err)
	}
	// Once no sandbox runs on them, the images and layers go.
	list, err := d.Client.ListAllSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(dir string, keep func(string) bool) bool {
		for _, e := range harness.DirEntries(dir) {
			if !keep(e) {
				return false
			}
		}
		return true
	}
	if !harness.WaitFor(30*time.Second, func() bool {
		// The daemon's own work directory (.tmp-*, held while it runs) is
		// not an image.
		return gone(images, func(e string) bool { return strings.HasPrefix(e, ".tmp-") })
	}) {
		t.Errorf("images left after their template and sandboxes went: %v", harness.DirEntries(images))
	}
	// (The local object store keeps a deleted set's empty directory.)
	layers := filepath.Join(d.DataDir, "objects", "templates")
	stored := func() []string {
		var out []string
		for _, e := range harness.DirEntries(layers) {
			if _, err := os.Stat(filepath.Join(layers, e, "manifest.json")); err == nil && !strings.HasPrefix(e, "files-") {
				out = append(out, e)
			}
		}
		return out
	}
	if !harness.WaitFor(30*time.Second, func() bool { return len(stored()) == 0 }) {
		t.Errorf("layers left in the object store: %v", stored())
	}
}

// storedBytes is the sum of the sizes the manifests of the layers and
// start checkpoints in d's object store give.
func storedBytes(t *testing.T, d *harness.Daemon) int64 {
	t.Helper()
	dir := filepath.Join(d.DataDir, "objects", "templates")
	var n int64
	for _, e := range harness.DirEntries(dir) {
		if !strings.HasPrefix(e, "layer-") && !strings.HasPrefix(e, "start-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e, "manifest.json"))
		if err != nil {
			continue // an incomplete or deleted one
		}
		var m struct {
			Bytes int64 `json:"bytes"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		n += m.Bytes
	}
	return n
}

// TestPoolPerTemplate: a warm pool of a started template fills once the
// template is built, creates are served from it (its sandboxes restored
// from the template's checkpoint, the server answering), and after a new
// build the pool hands out only sandboxes of the new image.
func TestPoolPerTemplate(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "pool", CIDR: "10.247.32.0/22", Pool: "served=2:2"})
	req := func(v string) client.BuildRequest {
		return client.BuildRequest{Name: "served", From: &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{Run: "mkdir -p /home/user/www && echo " + v + " > /home/user/www/index.html"}},
			Start: &client.BuildStart{Cmd: "python3 -m http.server 8000 --directory /home/user/www", Ready: client.BuildReady{Port: 8000}}}
	}
	mustBuild(t, d, "", req("one"))
	if !harness.WaitFor(time.Minute, func() bool { return poolReady(t, d, "served") == 2 }) {
		t.Fatalf("the pool of served did not fill (%d ready)", poolReady(t, d, "served"))
	}
	misses := metric(t, d, `space_pool_misses_total{template="served"}`)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "served"})
	if got := metric(t, d, `space_pool_misses_total{template="served"}`); got != misses {
		t.Errorf("the create missed the pool (%v misses, was %v)", got, misses)
	}
	if got := sh(t, d, sb.ID, "", "curl -s http://localhost:8000/index.html"); got != "one\n" {
		t.Errorf("pooled sandbox answers %q", got)
	}

	mustBuild(t, d, "", req("two"))
	for i := 0; i < 3; i++ {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "served"})
		if got := sh(t, d, sb.ID, "", "curl -s http://localhost:8000/index.html"); got != "two\n" {
			t.Errorf("after the rebuild create %d got a sandbox answering %q", i, got)
		}
	}
}

// poolReady reads space_pool_ready for template.
func poolReady(t *testing.T, d *harness.Daemon, template string) int {
	return int(metric(t, d, `space_pool_ready{template="`+template+`"}`))
}

// metric reads one sample of spaced's /metrics (0 when absent).
func metric(t *testing.T, d *harness.Daemon, series string) float64 {
	t.Helper()
	text, err := d.Client.Metrics(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestFailedRebuild: a rebuild of a tag that fails (at a RUN step, or at
// its start command once every layer and its image are made) leaves the
// tag on the previous good build, and creates get that build, restored from
// its start checkpoint, also after the collector has removed what the
// failed builds made.
func TestFailedRebuild(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "rebuild", CIDR: "10.247.44.0/22",
		Env: []string{"SPACE_TEMPLATE_CACHE_TTL=1s", "SPACE_TEMPLATE_GC_INTERVAL=1s"}})
	ctx := harness.Ctx(t, 5*time.Minute)
	page := func(v string) client.BuildStep {
		return client.BuildStep{Run: "mkdir -p /home/user/www && echo " + v + " > /home/user/www/index.html"}
	}
	serve := &client.BuildStart{Cmd: "python3 -m http.server 8000 --directory /home/user/www", Ready: client.BuildReady{Port: 8000}}
	v1 := mustBuild(t, d, "", client.BuildRequest{Name: "keep:v1", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{page("v1")}, Start: serve})

	// checkV1 holds after each failed rebuild: the tag names v1's build
	// and image, and a new sandbox of keep:v1 serves v1's page.
	checkV1 := func(after string) {
		t.Helper()
		tpl, err := d.Client.GetTemplate(ctx, "keep")
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
		if len(tpl.Tags) != 1 || tpl.Tags[0].Tag != "v1" || tpl.Tags[0].Build != v1.ID || tpl.Tags[0].Image != v1.Image {
			t.Errorf("after %s the tags are %+v, want only v1 on build %s (image %s)", after, tpl.Tags, v1.ID, v1.Image)
		}
		sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "keep:v1"})
		if got := sh(t, d, sb.ID, "", "cat /home/user/www/index.html"); got != "v1\n" {
			t.Errorf("after %s a sandbox of keep:v1 has the page %q", after, got)
		}
		if got := sh(t, d, sb.ID, "", "curl -sf http://localhost:8000/index.html"); got != "v1\n" {
			t.Errorf("after %s a sandbox of keep:v1 serves %q", after, got)
		}
	}
	checkV1("the first build")

	// A RUN that fails after a step that changed the page: the failed
	// build made a layer and an image holding v2.
	runFails := build(t, d, "", client.BuildRequest{Name: "keep:v1", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{page("v2"), {Run: "exit 7"}}, Start: serve})
	if e := runFails.Error; runFails.State != client.BuildStateFailed || e == nil || e.Step != 2 || e.ExitCode == nil || *e.ExitCode != 7 {
		t.Fatalf("rebuild with a failing RUN: %s, error %+v; want failed at step 2 with exit 7", runFails.State, e)
	}
	checkV1("a rebuild whose RUN failed")

	// Every step succeeds, the start command exits before it is ready.
	startFails := build(t, d, "", client.BuildRequest{Name: "keep:v1", From: &client.BuildFrom{Template: "base"},
		Steps: []client.BuildStep{page("v3")}, Start: &client.BuildStart{Cmd: "exit 5", Ready: client.BuildReady{Port: 8000}}})
	if e := startFails.Error; startFails.State != client.BuildStateFailed || e == nil || !strings.Contains(e.Message, "exited with code 5") {
		t.Fatalf("rebuild with a failing start command: %s, error %+v", startFails.State, e)
	}
	checkV1("a rebuild whose start command failed")

	// The collector removes the failed builds' layers (v2's and v3's
	// pages), never the tagged build's.
	if !harness.WaitFor(time.Minute, func() bool {
		return metric(t, d, `space_template_collected_total{kind="layer"}`) >= 2
	}) {
		t.Fatalf("the failed builds' layers were not collected (%v layers)", metric(t, d, `space_template_collected_total{kind="layer"}`))
	}
	checkV1("a collection")
}
