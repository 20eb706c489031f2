package blobstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/errdefs"
)

const (
	vgwAccess = "spacetest"
	vgwSecret = "spacetest-secret"
	vgwBucket = "space"
)

// versity is a real S3 server (versitygw over a local directory).
type versity struct {
	bin, dir, addr string
	cmd            *exec.Cmd
}

func versityBinary(t *testing.T) string {
	bin := os.Getenv("SPACE_VERSITYGW")
	if bin == "" {
		bin = "/usr/local/lib/space/bin/versitygw"
	}
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("versitygw"); err != nil {
			t.Skip("versitygw not installed: run scripts/install-versitygw.sh")
		}
	}
	return bin
}

func startVersity(t *testing.T) *versity {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	v := &versity{bin: versityBinary(t), dir: t.TempDir(), addr: addr}
	if err := os.Mkdir(v.dir+"/"+vgwBucket, 0o755); err != nil { // a bucket is a directory
		t.Fatal(err)
	}
	v.start(t)
	t.Cleanup(v.stop)
	return v
}

func (v *versity) start(t *testing.T) {
	t.Helper()
	v.cmd = exec.Command(v.bin, "--access", vgwAccess, "--secret", vgwSecret, "--port", v.addr, "posix", v.dir)
	v.cmd.Stdout, v.cmd.Stderr = io.Discard, io.Discard
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", v.addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("versitygw did not listen on %s", v.addr)
}

func (v *versity) stop() {
	if v.cmd != nil && v.cmd.Process != nil {
		v.cmd.Process.Kill()
		v.cmd.Wait()
		v.cmd = nil
	}
}

func (v *versity) store(t *testing.T) *blobstore.S3 {
	t.Helper()
	s, err := blobstore.NewS3(blobstore.S3Options{
		Endpoint: "http://" + v.addr, Bucket: vgwBucket, AccessKey: vgwAccess, SecretKey: vgwSecret,
		MaxBackoff: 200 * time.Millisecond,
		// Small enough that the suite's 20 MiB object takes the multipart copy path.
		MaxSingleCopy: 16 << 20, CopyPartSize: 8 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	blobstoretest.Run(t, blobstoretest.Backend{
		New: func(t *testing.T) blobstore.Store { return startVersity(t).store(t) },
		Corrupt: func(t *testing.T, st blobstore.Store, key string) {
			c := st.(*blobstore.S3).Client()
			ctx := context.Background()
			head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(vgwBucket), Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			junk := blobstoretest.Random(99, int(aws.ToInt64(head.ContentLength)))
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(vgwBucket), Key: &key,
				Body: bytes.NewReader(junk), Metadata: head.Metadata})
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}

// stopAfter kills the server once n bytes have been read.
type stopAfter struct {
	r    io.Reader
	n    int
	stop func()
}

func (s *stopAfter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.n -= n; s.n <= 0 && s.stop != nil {
		s.stop()
		s.stop = nil
	}
	return n, err
}

func TestS3ServerStopsMidUpload(t *testing.T) {
	v := startVersity(t)
	s := v.store(t)
	data := blobstoretest.Random(5, 64<<20)
	src := &stopAfter{r: struct{ io.Reader }{bytes.NewReader(data)}, n: 24 << 20, stop: v.stop}
	start := time.Now()
	_, err := s.Put(context.Background(), "big/k", src, int64(len(data)))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Put while the server stops: %v, want ErrUnavailable", err)
	}
	if msg := errdefs.PublicMessage(err); !bytes.Contains([]byte(msg), []byte(v.addr)) {
		t.Errorf("error message %q does not name the endpoint %s", msg, v.addr)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)

	if _, err := s.Stat(context.Background(), "big/k"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Stat with the server down: %v, want ErrUnavailable", err)
	}
	v.start(t) // same directory and address
	if _, err := s.Stat(context.Background(), "big/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after the failed upload: %v, want ErrNotFound", err)
	}
}
