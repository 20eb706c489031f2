package blobstoretest

import (
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/testenv"
)

// Versity is a real S3 server (versitygw over a local directory) for tests
// of packages built on blobstore. StartVersity skips the test when versitygw
// is not installed (scripts/install-versitygw.sh), or fails it under strict
// mode (internal/testenv).
type Versity struct {
	Addr string
	// Dir holds the bucket as a directory: tests read the bytes at rest.
	Dir string
	bin string

	mu  sync.Mutex // Start and Stop may run on different goroutines
	cmd *exec.Cmd
}

// VersityBucket is the bucket StartVersity makes.
const VersityBucket = "space"

const (
	versityAccess = "spacetest"
	versitySecret = "spacetest-secret"
)

// StartVersity starts a server with an empty bucket; it stops at cleanup.
func StartVersity(t testing.TB) *Versity {
	t.Helper()
	bin := testenv.NeedVersitygw(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	v := &Versity{Addr: addr, bin: bin, Dir: t.TempDir()}
	if err := os.Mkdir(v.Dir+"/"+VersityBucket, 0o755); err != nil { // a bucket is a directory
		t.Fatal(err)
	}
	v.Start(t)
	t.Cleanup(v.Stop)
	return v
}

// Start (re)starts the server on the same address and directory.
func (v *Versity) Start(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cmd = exec.Command(v.bin, "--access", versityAccess, "--secret", versitySecret, "--port", v.Addr, "posix", v.Dir)
	v.cmd.Stdout, v.cmd.Stderr = io.Discard, io.Discard
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", v.Addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("versitygw did not listen on %s", v.Addr)
}

// Stop kills the server; it is safe to call twice.
func (v *Versity) Stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd != nil && v.cmd.Process != nil {
		v.cmd.Process.Kill()
		v.cmd.Wait()
		v.cmd = nil
	}
}

// Options are the server's endpoint, bucket and credentials, with short
// backoffs so that tests of an unreachable server fail fast.
func (v *Versity) Options() blobstore.S3Options {
	return blobstore.S3Options{
		Endpoint: "http://" + v.Addr, Bucket: VersityBucket, AccessKey: versityAccess, SecretKey: versitySecret,
		MaxBackoff: 200 * time.Millisecond,
	}
}

// Store returns a client of the server with Options.
func (v *Versity) Store(t *testing.T) *blobstore.S3 {
	t.Helper()
	s, err := blobstore.NewS3(v.Options())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
