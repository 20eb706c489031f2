package blobstoretest

import (
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
)

// Versity is a real S3 server (versitygw over a local directory) for tests
// of packages built on blobstore. StartVersity skips the test when versitygw
// is not installed (scripts/install-versitygw.sh).
type Versity struct {
	Addr string
	bin  string
	dir  string
	cmd  *exec.Cmd
}

const (
	versityAccess = "spacetest"
	versitySecret = "spacetest-secret"
	versityBucket = "space"
)

// StartVersity starts a server with an empty bucket; it stops at cleanup.
func StartVersity(t *testing.T) *Versity {
	t.Helper()
	bin := os.Getenv("SPACE_VERSITYGW")
	if bin == "" {
		bin = "/usr/local/lib/space/bin/versitygw"
	}
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("versitygw"); err != nil {
			t.Skip("versitygw not installed: run scripts/install-versitygw.sh")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	v := &Versity{Addr: addr, bin: bin, dir: t.TempDir()}
	if err := os.Mkdir(v.dir+"/"+versityBucket, 0o755); err != nil { // a bucket is a directory
		t.Fatal(err)
	}
	v.Start(t)
	t.Cleanup(v.Stop)
	return v
}

// Start (re)starts the server on the same address and directory.
func (v *Versity) Start(t *testing.T) {
	t.Helper()
	v.cmd = exec.Command(v.bin, "--access", versityAccess, "--secret", versitySecret, "--port", v.Addr, "posix", v.dir)
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
	if v.cmd != nil && v.cmd.Process != nil {
		v.cmd.Process.Kill()
		v.cmd.Wait()
		v.cmd = nil
	}
}

// Store returns a client of the server with short backoffs, so that tests
// of an unreachable server fail fast.
func (v *Versity) Store(t *testing.T) *blobstore.S3 {
	t.Helper()
	s, err := blobstore.NewS3(blobstore.S3Options{
		Endpoint: "http://" + v.Addr, Bucket: versityBucket, AccessKey: versityAccess, SecretKey: versitySecret,
		MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
