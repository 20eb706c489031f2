package blobstore

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// copyWithSum copies the complete staging object to key, replacing its
// metadata with the checksum. S3 copies are atomic: key shows either its old
// object or the new one. Above MaxSingleCopy a multipart copy is needed.
func (s *S3) copyWithSum(ctx context.Context, src, key string, size int64, sum string) error {
	source := s.opts.Bucket + "/" + url.PathEscape(src)
	meta := map[string]string{metaSHA256: sum}
	if size <= s.opts.MaxSingleCopy {
		_, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket:            &s.opts.Bucket,
			Key:               &key,
			CopySource:        &source,
			Metadata:          meta,
			MetadataDirective: types.MetadataDirectiveReplace,
		})
		return err
	}
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &s.opts.Bucket, Key: &key, Metadata: meta})
	if err != nil {
		return err
	}
	complete := false
	defer func() {
		if !complete {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.opts.Bucket, Key: &key, UploadId: created.UploadId})
		}
	}()
	var parts []types.CompletedPart
	for off, num := int64(0), int32(1); off < size; off, num = off+s.opts.CopyPartSize, num+1 {
		end := min(off+s.opts.CopyPartSize, size) - 1
		out, err := s.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{
			Bucket:          &s.opts.Bucket,
			Key:             &key,
			UploadId:        created.UploadId,
			PartNumber:      aws.Int32(num),
			CopySource:      &source,
			CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", off, end)),
		})
		if err != nil {
			return err
		}
		parts = append(parts, types.CompletedPart{ETag: out.CopyPartResult.ETag, PartNumber: aws.Int32(num)})
	}
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &s.opts.Bucket, Key: &key, UploadId: created.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return err
	}
	complete = true
	return nil
}
