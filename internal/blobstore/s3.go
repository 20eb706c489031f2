package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Why this client: the official AWS SDK for Go v2 is maintained by AWS,
// speaks SigV4 and path-style addressing to any S3-compatible server, has a
// bounded retryer with jittered exponential backoff, and its
// feature/s3/transfermanager does parallel multipart uploads from a plain
// io.Reader, buffering only PartSize*(Concurrency+1) bytes and aborting the
// multipart upload on failure. It replaced feature/s3/manager, which AWS
// deprecated in its favour; it is still v0.x, so its version is pinned and
// the S3 tests here run against a real server.

// metaSHA256 is the user metadata key (x-amz-meta-sha256) holding the hex SHA-256.
const metaSHA256 = "sha256"

// stagingPrefix holds objects larger than one part while they upload: their
// SHA-256 is known only at the end, after S3 has fixed the metadata, so they
// are copied to their key with the checksum once complete. A crash leaves a
// staging object (and at worst an unfinished multipart upload), never a
// partial object under the key; a bucket lifecycle rule on this prefix and on
// incomplete multipart uploads reclaims them.
const stagingPrefix = reservedPrefix + "staging/"

// S3Options configures an S3 store. Zero values get the defaults noted.
type S3Options struct {
	Logger       *slog.Logger // nil: discarded
	Endpoint     string       // e.g. "http://127.0.0.1:7070"; empty means AWS
	Region       string       // default "us-east-1"
	Bucket       string       // required
	AccessKey    string       // required with SecretKey: static credentials
	SecretKey    string
	SessionToken string

	PartSize      int64         // multipart part size, default 8 MiB (min 5 MiB)
	Concurrency   int           // parts in flight per upload, default 4
	MaxAttempts   int           // attempts per request including the first, default 4
	MaxBackoff    time.Duration // cap on the backoff between attempts, default 2s
	DialTimeout   time.Duration // default 5s
	MaxSingleCopy int64         // objects above this are copied in parts, default 5 GiB (S3's limit)
	CopyPartSize  int64         // part size of such copies, default 512 MiB
}

func (o *S3Options) defaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.PartSize, 8<<20)
	def(&o.MaxSingleCopy, 5<<30)
	def(&o.CopyPartSize, 512<<20)
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 2 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
}

// S3 is a Store in one S3 bucket.
type S3 struct {
	opts     S3Options
	client   *s3.Client
	transfer *transfermanager.Client
	where    string // endpoint named in errors
}

var _ Store = (*S3)(nil)

// NewS3 builds an S3 store. It does not contact the server.
func NewS3(opts S3Options) (*S3, error) {
	opts.defaults()
	if opts.Bucket == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "s3 store: bucket is required")
	}
	if opts.AccessKey == "" || opts.SecretKey == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "s3 store: access key and secret key are required")
	}
	if opts.PartSize < 5<<20 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "s3 store: part size %d is below S3's 5 MiB minimum", opts.PartSize)
	}
	httpClient := awshttp.NewBuildableClient().WithDialerOptions(func(d *net.Dialer) {
		d.Timeout = opts.DialTimeout
	})
	client := s3.New(s3.Options{
		Region:       opts.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(opts.AccessKey, opts.SecretKey, opts.SessionToken),
		HTTPClient:   httpClient,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = opts.MaxAttempts
			o.MaxBackoff = opts.MaxBackoff
			// The client-side retry quota would turn an outage into
			// "quota exceeded" errors that hide the real cause.
			o.RateLimiter = ratelimit.None
		}),
		// We keep our own end-to-end SHA-256; the SDK's extra CRCs are
		// only sent where S3 requires them.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
	})
	transfer := transfermanager.New(client, func(o *transfermanager.Options) {
		o.PartSizeBytes = opts.PartSize
		// putLarge only sees sources longer than one part: always multipart.
		o.MultipartUploadThreshold = opts.PartSize
		o.Concurrency = opts.Concurrency
		// Parts carry a CRC32 (this takes precedence over the client's
		// WhenRequired), as they did with feature/s3/manager.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported
		// Abort the multipart upload of a failed Put on a fresh context, so
		// a cancelled Put does not leave its parts behind (as removeStaging).
		o.FailTimeout = 10 * time.Second
	})
	where := opts.Endpoint
	if where == "" {
		where = "AWS S3 (" + opts.Region + ")"
	}
	return &S3{opts: opts, client: client, transfer: transfer, where: where}, nil
}

// Client exposes the underlying SDK client (tests use it to tamper with objects).
func (s *S3) Client() *s3.Client { return s.client }

// Put stores objects up to one part with a single PutObject carrying the
// checksum; larger ones go through a staging key (see stagingPrefix).
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	hr := newHashingReader(r)
	first := make([]byte, s.opts.PartSize+1)
	n, err := io.ReadFull(hr, first)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return s.putSmall(ctx, key, first[:n], hr, size)
	case err != nil:
		return Info{}, fmt.Errorf("blobstore: put %q: read source: %w", key, err)
	}
	return s.putLarge(ctx, key, io.MultiReader(bytes.NewReader(first), hr), hr, size)
}

func (s *S3) putSmall(ctx context.Context, key string, data []byte, hr *hashingReader, size int64) (Info, error) {
	if err := checkSize(key, size, hr.n); err != nil {
		return Info{}, err
	}
	sum := hr.sum()
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.opts.Bucket,
		Key:           &key,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      map[string]string{metaSHA256: sum},
	})
	if err != nil {
		return Info{}, s.classify("put", key, err)
	}
	return s.Stat(ctx, key)
}

func (s *S3) putLarge(ctx context.Context, key string, body io.Reader, hr *hashingReader, size int64) (Info, error) {
	staging := stagingPrefix + randomHex()
	defer s.removeStaging(ctx, staging)
	_, err := s.transfer.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: &s.opts.Bucket, Key: &staging, Body: body})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// A failed abort after the cancellation replaces the error
			// with one formatted by %v, which no longer says why.
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return Info{}, s.classify("put", key, err)
	}
	if err := checkSize(key, size, hr.n); err != nil {
		return Info{}, err
	}
	if err := s.copyWithSum(ctx, staging, key, hr.n, hr.sum()); err != nil {
		return Info{}, s.classify("put: copy from staging", key, err)
	}
	return s.Stat(ctx, key)
}

// removeStaging deletes a staging object even when ctx was cancelled.
func (s *S3) removeStaging(ctx context.Context, staging string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.opts.Bucket, Key: &staging}); err != nil {
		s.opts.Logger.WarnContext(ctx, "blobstore: staging object left behind", "key", staging, "err", err)
	}
}

// Get opens key; see Store.Get for the verification at EOF.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	body, info, err := s.open(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	return newVerifyingReader(body, key, info.Size, info.SHA256), info, nil
}

// GetAuthenticated opens key; see Store.GetAuthenticated.
func (s *S3) GetAuthenticated(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	body, info, err := s.open(ctx, key)
	if err != nil {
		return nil, Info{}, err
	}
	return newSizeCheckingReader(body, key, info.Size), info, nil
}

func (s *S3) open(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.opts.Bucket, Key: &key})
	if err != nil {
		return nil, Info{}, s.classify("get", key, err)
	}
	info := Info{Key: key, Size: aws.ToInt64(out.ContentLength), SHA256: out.Metadata[metaSHA256], Modified: aws.ToTime(out.LastModified)}
	if info.SHA256 == "" {
		out.Body.Close()
		return nil, Info{}, fmt.Errorf("%w: object %q has no recorded sha256", ErrChecksum, key)
	}
	return out.Body, info, nil
}

// Stat describes key.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: &key})
	if err != nil {
		return Info{}, s.classify("stat", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), SHA256: out.Metadata[metaSHA256], Modified: aws.ToTime(out.LastModified)}, nil
}

// Delete removes key; S3 itself treats a missing key as success.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.opts.Bucket, Key: &key}); err != nil {
		if errors.Is(s.classify("delete", key, err), errdefs.ErrNotFound) {
			return nil
		}
		return s.classify("delete", key, err)
	}
	return nil
}

// List pages through ListObjectsV2. SHA256 is left empty: it lives in each
// object's metadata, which would cost one HEAD per object.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	var out []Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.opts.Bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.classify("list", prefix, err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if strings.HasPrefix(k, reservedPrefix) || strings.Contains(k, "/"+reservedPrefix) {
				continue
			}
			out = append(out, Info{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func randomHex() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
