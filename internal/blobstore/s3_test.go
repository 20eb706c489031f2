package blobstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/errdefs"
)

// s3Store is a client of v whose single-copy limit is small enough that
// the suite's 20 MiB object takes the multipart copy path.
func s3Store(t *testing.T, v *blobstoretest.Versity) *blobstore.S3 {
	t.Helper()
	o := v.Options()
	o.MaxSingleCopy, o.CopyPartSize = 16<<20, 8<<20
	s, err := blobstore.NewS3(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	blobstoretest.Run(t, blobstoretest.Backend{
		New: func(t *testing.T) blobstore.Store { return s3Store(t, blobstoretest.StartVersity(t)) },
		Corrupt: func(t *testing.T, st blobstore.Store, key string) {
			c := st.(*blobstore.S3).Client()
			ctx := context.Background()
			head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(blobstoretest.VersityBucket), Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			junk := blobstoretest.Random(99, int(aws.ToInt64(head.ContentLength)))
			_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(blobstoretest.VersityBucket), Key: &key,
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
	v := blobstoretest.StartVersity(t)
	s := s3Store(t, v)
	data := blobstoretest.Random(5, 64<<20)
	src := &stopAfter{r: struct{ io.Reader }{bytes.NewReader(data)}, n: 24 << 20, stop: v.Stop}
	start := time.Now()
	_, err := s.Put(context.Background(), "big/k", src, int64(len(data)))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Put while the server stops: %v, want ErrUnavailable", err)
	}
	if msg := errdefs.PublicMessage(err); !bytes.Contains([]byte(msg), []byte(v.Addr)) {
		t.Errorf("error message %q does not name the endpoint %s", msg, v.Addr)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)

	if _, err := s.Stat(context.Background(), "big/k"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Stat with the server down: %v, want ErrUnavailable", err)
	}
	v.Start(t) // same directory and address
	if _, err := s.Stat(context.Background(), "big/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after the failed upload: %v, want ErrNotFound", err)
	}
}
