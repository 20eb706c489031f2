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

// A cancelled Put aborts its multipart upload, so no parts stay stored
// (and billed) until a lifecycle rule finds them.
func TestS3CancelAbortsMultipartUpload(t *testing.T) {
	v := blobstoretest.StartVersity(t)
	s := s3Store(t, v)
	c := s.Client()
	bucket := aws.String(blobstoretest.VersityBucket)
	uploads := func() int {
		t.Helper()
		out, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}

	// Positive control: the server lists an unfinished upload.
	created, err := c.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: bucket, Key: aws.String("control")})
	if err != nil {
		t.Fatal(err)
	}
	if n := uploads(); n != 1 {
		t.Fatalf("ListMultipartUploads shows %d uploads after creating one", n)
	}
	if _, err := c.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: bucket, Key: aws.String("control"), UploadId: created.UploadId}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := blobstoretest.Random(7, 40<<20)
	src := &stopAfter{r: struct{ io.Reader }{bytes.NewReader(data)}, n: 20 << 20, stop: cancel}
	if _, err := s.Put(ctx, "cancel/k", src, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled mid-upload: %v, want context.Canceled", err)
	}
	if n := uploads(); n != 0 {
		t.Fatalf("%d multipart uploads left after a cancelled Put", n)
	}
}

// When the abort after a cancellation fails too, the error still says the
// Put was cancelled.
func TestS3CancelWhileServerStops(t *testing.T) {
	v := blobstoretest.StartVersity(t)
	s := s3Store(t, v)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := blobstoretest.Random(8, 40<<20)
	src := &stopAfter{r: struct{ io.Reader }{bytes.NewReader(data)}, n: 20 << 20, stop: func() { cancel(); v.Stop() }}
	if _, err := s.Put(ctx, "cancel/k", src, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled as the server stops: %v, want context.Canceled", err)
	}
}
