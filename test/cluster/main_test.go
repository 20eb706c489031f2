// Package cluster runs spaced in cluster mode with real parts: a PostgreSQL
// server (Debian's package) as the catalog, versitygw as the object store,
// and three spaced nodes on this host, each with its own data directory,
// sandbox range and port. It checks what a user of any node sees (every
// request works through a node that does not run the sandbox, pause on one
// node and resume on another, two resumes at once) and what happens when a
// node or the database goes away.
package cluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/store/pgtest"
	"github.com/spacesandbox/space/test/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name: "cluster",
		Root: "they run spaced, runsc, netns and nftables",
	}))
}

// testCluster is a PostgreSQL server, an S3 server and nodes sharing them
// (the same admin key and platform key).
type testCluster struct {
	pg    *pgtest.Server
	s3    *blobstoretest.Versity
	nodes []*harness.Daemon
}

// rangeBase: this package's sandbox ranges are in 10.250.0.0/16, a /22
// per node; base picks a /20 block for one test's cluster.
func newCluster(t testing.TB, block int, lease time.Duration, n int) *testCluster {
	t.Helper()
	return newClusterWith(t, block, lease, n, nil)
}

// newClusterWith is newCluster with more environment for node i (0-based).
func newClusterWith(t testing.TB, block int, lease time.Duration, n int, envOf func(i int) []string) *testCluster {
	t.Helper()
	harness.Need(t)
	c := &testCluster{pg: pgtest.Start(t), s3: blobstoretest.StartVersity(t)}
	db := c.pg.NewDatabase(t)
	key := harness.NewAPIKey()
	keyFile := filepath.Join(t.TempDir(), "platform.json")
	s3 := c.s3.Options()
	for i := range n {
		o := harness.Options{
			Name: fmt.Sprintf("n%d", i+1), CIDR: fmt.Sprintf("10.250.%d.0/22", block*16+i*4), NoPool: true,
			APIKey: key, Catalog: db, Lease: lease, BootTimeout: 10 * time.Second,
			Env: []string{
				"SPACE_OBJECT_STORE=s3://" + s3.Bucket, "SPACE_S3_ENDPOINT=" + s3.Endpoint,
				"SPACE_S3_ACCESS_KEY=" + s3.AccessKey, "SPACE_S3_SECRET_KEY=" + s3.SecretKey,
				"SPACE_PLATFORM_KEY_FILE=" + keyFile,
			},
		}
		if envOf != nil {
			o.Env = append(o.Env, envOf(i)...)
		}
		c.nodes = append(c.nodes, harness.Own(t, o))
	}
	return c
}

// sh runs cmd in sandbox id through node d and answers its stdout.
func sh(t *testing.T, d *harness.Daemon, id, cmd string) string {
	t.Helper()
	r, err := d.Exec(harness.Ctx(t, 30*time.Second), id, client.CommandRequest{Cmd: cmd})
	if err != nil {
		t.Fatalf("exec %q through %s: %v", cmd, d.Opts.Name, err)
	}
	if r.Exit == nil || r.Exit.Code() != 0 {
		t.Fatalf("exec %q through %s: exit %+v, stderr %q", cmd, d.Opts.Name, r.Exit, r.Stderr)
	}
	return r.Stdout
}

// nodeOf answers the node that runs sandbox id, as any node reports it.
func nodeOf(t *testing.T, d *harness.Daemon, id string) (state, node string) {
	t.Helper()
	sb, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), id)
	if err != nil {
		t.Fatalf("get %s through %s: %v", id, d.Opts.Name, err)
	}
	return string(sb.State), sb.Node
}

// waitLine reads lines from sc until one holds want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("closed before %q", want)
			}
			if strings.Contains(l, want) && !strings.Contains(l, "echo") {
				return
			}
		case <-deadline:
			t.Fatalf("no %q", want)
		}
	}
}

func scanLines(r interface{ Read([]byte) (int, error) }) <-chan string {
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// poolReady waits until node d has a ready warm sandbox of template.
func poolReady(t testing.TB, d *harness.Daemon, template string) {
	t.Helper()
	ctx := harness.Ctx(t, 2*time.Minute)
	for {
		ps, err := d.Client.Pools(ctx)
		if err != nil {
			t.Fatalf("pools of %s: %v", d.Opts.Name, err)
		}
		for _, p := range ps {
			if p.Template == template && p.Ready > 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s has no ready %s sandbox in its pool: %+v", d.Opts.Name, template, ps)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// metric answers the value of one series of node d's /metrics (0 when
// it has none).
func metric(t testing.TB, d *harness.Daemon, series string) float64 {
	t.Helper()
	text, err := d.Client.Metrics(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// heldBy lists what node d holds of sandbox id in its own data directory
// (runsc state, bundle). The host-wide pieces (netns, link, cgroups) carry
// the sandbox id only, the same whichever node runs it.
func heldBy(d *harness.Daemon, id string) []string {
	var left []string
	for _, l := range d.Leftovers(id) {
		if strings.Contains(l, d.DataDir) {
			left = append(left, l)
		}
	}
	return left
}
