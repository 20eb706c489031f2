package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkValidate times what the spec's validation adds to a request
// before its handler, on the two hot routes (a create and a command),
// beside the same request served without it (the anchor).
func BenchmarkValidate(b *testing.B) {
	c, err := loadContract()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, pattern, path, body string }{
		{"create", "POST /v1/sandboxes", "/v1/sandboxes", `{"template":"base","timeout_seconds":600,"metadata":{"owner":"me"},"env":{"A":"1"}}`},
		{"command", "POST /v1/sandboxes/{id}/commands", "/v1/sandboxes/abcdefghij0123456789/commands", `{"cmd":"echo hi","env":{"A":"1"},"cwd":"/home/user"}`},
	} {
		op := c.operation(bc.pattern)
		if op == nil {
			b.Fatalf("no operation %s", bc.pattern)
		}
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		for _, v := range []struct {
			name string
			h    http.Handler
		}{{"bare", ok}, {"validated", c.validate(bc.pattern, op, ok)}} {
			mux := http.NewServeMux()
			mux.Handle(bc.pattern, v.h)
			b.Run(bc.name+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					w := httptest.NewRecorder()
					mux.ServeHTTP(w, httptest.NewRequest("POST", bc.path, strings.NewReader(bc.body)))
					if w.Code != http.StatusNoContent {
						b.Fatalf("%d %s", w.Code, w.Body)
					}
				}
			})
		}
	}
}

// zeros reads n zero bytes.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// TestValidateStreamsUploads: the spec's validation leaves an upload's
// body to its handler as a stream. kin-openapi's security step reads the
// whole body into memory to hand it to an authentication function: a
// 1 GiB upload into a sandbox grew spaced by 2.8 GB (the red-team attempt
// res-disk-fill-api) until the validated route carried no security
// requirement (the chain authenticates before it).
func TestValidateStreamsUploads(t *testing.T) {
	c, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	for _, pattern := range []string{"PUT /v1/sandboxes/{id}/files", "PUT /v1/files/{hash}", "PUT /v1/volumes/{volume}/files"} {
		op := c.operation(pattern)
		if op == nil {
			t.Fatalf("no operation %s", pattern)
		}
		var read int64
		mux := http.NewServeMux()
		mux.Handle(pattern, c.validate(pattern, op, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			read, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		})))
		path := strings.NewReplacer("{id}", "abcdefghij0123456789", "{hash}", strings.Repeat("ab", 32), "{volume}", "vol1").Replace(strings.TrimPrefix(pattern, "PUT "))
		req := httptest.NewRequest("PUT", path+"?path=/home/user/x", io.NopCloser(&zeros{n: size}))
		req.ContentLength = -1
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if w.Code != http.StatusNoContent || read != size {
			t.Errorf("%s: %d %s, the handler read %d of %d bytes", pattern, w.Code, w.Body, read, size)
		}
		if alloc > size/4 {
			t.Errorf("%s: %d MiB allocated for a %d MiB upload: the body was buffered", pattern, alloc>>20, size>>20)
		}
	}
}
