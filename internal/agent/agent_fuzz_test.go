package agent

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The fuzz targets call the agent's whole handler (token check, Connect
// handlers, /files) in process. The agent runs as root here, so every
// target keeps writes inside its temporary directory: uploads always name
// their path, and only read-only procedures get fuzzed bodies.

const fuzzToken = "fuzz-token"

func fuzzAgent(f *testing.F) (http.Handler, string) {
	f.Helper()
	dir := f.TempDir()
	s, err := New(Config{
		StatePath: filepath.Join(dir, "state", "state.json"), BootToken: fuzzToken, DefaultUser: "root",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Close)
	return s.Handler(), dir
}

// checkFilesError: /files answers client garbage with 4xx and envd's JSON
// error body, never 5xx.
func checkFilesError(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: status %d: %s", what, rec.Code, rec.Body.Bytes())
	}
	if rec.Code < 400 {
		return
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.Message == "" {
		t.Fatalf("%s: error body %q for %d (%v)", what, rec.Body.Bytes(), rec.Code, err)
	}
}

// FuzzFilesUploadRaw sends arbitrary bodies as multipart or raw uploads,
// with arbitrary content types and encodings, to a fixed path.
func FuzzFilesUploadRaw(f *testing.F) {
	mp := func(parts ...string) (string, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for i, p := range parts {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="f%d"`, i))
			w, _ := mw.CreatePart(h)
			io.WriteString(w, p)
		}
		mw.Close()
		return mw.FormDataContentType(), buf.Bytes()
	}
	ct, body := mp("one", "two")
	f.Add(ct, "", body)
	ct, body = mp()
	f.Add(ct, "", body)
	f.Add("multipart/form-data; boundary=x", "", []byte("--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--x--\r\n"))
	f.Add("multipart/form-data; boundary=x", "", []byte("--x\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%ZZ\r\n\r\nabc\r\n--x"))
	f.Add("multipart/form-data", "", []byte("--x\r\n"))
	f.Add("multipart/form-data; boundary=\"", "", []byte(""))
	f.Add("application/octet-stream", "gzip", []byte("not gzip"))
	f.Add("application/octet-stream", "br", []byte("x"))
	f.Add("", "", []byte("plain"))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	f.Add("application/octet-stream", "gzip", gz.Bytes())
	h, dir := fuzzAgent(f)
	dest := filepath.Join(dir, "up", "file")
	f.Fuzz(func(t *testing.T, contentType, encoding string, body []byte) {
		req := httptest.NewRequest("POST", "/files?path="+url.QueryEscape(dest), bytes.NewReader(body))
		req.Header.Set(TokenHeader, fuzzToken)
		if !validHeader(contentType) || !validHeader(encoding) {
			return
		}
		req.Header.Set("Content-Type", contentType)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkFilesError(t, "upload", rec)
		if rec.Code != http.StatusOK {
			return
		}
		var out []struct {
			Path string `json:"path"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out) == 0 {
			t.Fatalf("upload answered 200 with %q", rec.Body.Bytes())
		}
		for _, e := range out {
			if e.Path != dest {
				t.Fatalf("upload to %s wrote %s", dest, e.Path)
			}
		}
	})
}

// FuzzFilesRoundTrip: what goes up as multipart, raw or gzip comes back
// down byte for byte, whole and by range.
func FuzzFilesRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), uint8(0), uint16(1), uint16(3))
	f.Add([]byte{}, uint8(1), uint16(0), uint16(0))
	f.Add(bytes.Repeat([]byte{0, 0xff, '\n', '-'}, 300), uint8(2), uint16(10), uint16(900))
	f.Add([]byte("\r\n--boundary\r\n"), uint8(0), uint16(0), uint16(5))
	h, dir := fuzzAgent(f)
	dest := filepath.Join(dir, "rt", "file")
	f.Fuzz(func(t *testing.T, content []byte, mode uint8, from, to uint16) {
		var body bytes.Buffer
		req := httptest.NewRequest("POST", "/files?path="+url.QueryEscape(dest), nil)
		switch mode % 3 {
		case 0:
			mw := multipart.NewWriter(&body)
			w, _ := mw.CreateFormFile("file", "ignored-when-path-is-set")
			w.Write(content)
			mw.Close()
			req.Header.Set("Content-Type", mw.FormDataContentType())
		case 1:
			body.Write(content)
			req.Header.Set("Content-Type", "application/octet-stream")
		case 2:
			zw := gzip.NewWriter(&body)
			zw.Write(content)
			zw.Close()
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("Content-Encoding", "gzip")
		}
		req.Body = io.NopCloser(&body)
		req.Header.Set(TokenHeader, fuzzToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("upload mode %d: %d %s", mode%3, rec.Code, rec.Body.Bytes())
		}
		if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("upload mode %d wrote %d bytes (%v), want %d", mode%3, len(got), err, len(content))
		}
		get := httptest.NewRequest("GET", "/files?path="+url.QueryEscape(dest), nil)
		get.Header.Set(TokenHeader, fuzzToken)
		lo, hi := int(min(from, to)), int(max(from, to))
		ranged := lo < len(content)
		if ranged {
			get.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, get)
		want := content
		if ranged {
			want = content[lo:min(hi+1, len(content))]
		}
		if rec.Code != http.StatusOK && rec.Code != http.StatusPartialContent || !bytes.Equal(rec.Body.Bytes(), want) {
			t.Fatalf("download (range %v %d-%d): %d, %d bytes, want %d", ranged, lo, hi, rec.Code, rec.Body.Len(), len(want))
		}
	})
}

// fuzzRPCs are read-only procedures: a fuzzed body can do no harm.
var fuzzRPCs = []string{
	"/filesystem.Filesystem/Stat", "/process.Process/List", "/process.Process/Connect",
	"/spaceagent.v1.Agent/Attach",
}

var fuzzContentTypes = []string{
	"application/json", "application/proto", "application/connect+json", "application/connect+proto",
	"application/grpc", "application/grpc-web+proto", "text/plain", "",
}

// envelope frames payload as Connect does for streams: a flags byte, a
// big-endian length and the message.
func envelope(flags byte, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(payload)))
	return append(out, payload...)
}

// FuzzConnectEnvelopes posts arbitrary bodies (framed or not) to the
// agent's Connect procedures with every content type. Connect errors must
// name the caller's mistake (never internal or unknown), and a stream's
// answer must be well-formed envelopes.
func FuzzConnectEnvelopes(f *testing.F) {
	for i, seed := range [][]byte{
		[]byte(`{"path":"/"}`), []byte(`{}`), envelope(0, []byte(`{"process":{"pid":4242}}`)),
		envelope(0, []byte(`{"process":{"pid":4242},"afterSeq":3}`)), []byte(`{"process":{"tag":"x"}}`),
		envelope(1, []byte(`{}`)), envelope(0, nil), []byte{0, 0xff, 0xff, 0xff, 0xff}, []byte{0x0a, 0x01, '/'},
		append(envelope(0, []byte(`{}`)), envelope(0, []byte(`{}`))...), []byte(`{"path":"\u0000"}`),
	} {
		f.Add(uint8(i), uint8(i), seed)
	}
	// Stat of a path with a NUL was a 500 (EINVAL unclassified).
	f.Add(uint8(0), uint8(0), []byte(`{"path":"\u0000"}`))
	h, _ := fuzzAgent(f)
	f.Fuzz(func(t *testing.T, proc, ct uint8, body []byte) {
		path := fuzzRPCs[int(proc)%len(fuzzRPCs)]
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set(TokenHeader, fuzzToken)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s (%s): status %d: %s", path, contentType, rec.Code, rec.Body.Bytes())
		}
		// connect-go reads a stream request's envelopes itself and answers
		// malformed framing (bad flags, a short or extra frame, an
		// end-of-stream flag from the client) with code internal: the
		// library's class, harmless (the stream just ends). So the code is
		// checked only when the framing was well formed.
		framed := !strings.Contains(contentType, "+") && !strings.HasPrefix(contentType, "application/grpc") || wellFramed(body)
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/connect+") || rec.Code != http.StatusOK {
			checkConnectError(t, path, rec.Body.Bytes(), framed)
			return
		}
		// A stream: envelopes to the end, the last one the end-of-stream.
		b := rec.Body.Bytes()
		var last []byte
		var flags byte
		for len(b) > 0 {
			if len(b) < 5 {
				t.Fatalf("%s: %d trailing bytes after the envelopes", path, len(b))
			}
			n := binary.BigEndian.Uint32(b[1:5])
			if uint32(len(b)-5) < n {
				t.Fatalf("%s: envelope of %d bytes with %d left", path, n, len(b)-5)
			}
			flags, last, b = b[0], b[5:5+n], b[5+n:]
		}
		if flags&0x02 == 0 {
			t.Fatalf("%s: stream without an end-of-stream envelope", path)
		}
		checkConnectError(t, path, last, framed)
	})
}

// wellFramed reports whether body is exactly one envelope with no flags:
// a stream request whose framing leaves nothing for the library to refuse.
func wellFramed(body []byte) bool {
	return len(body) >= 5 && body[0] == 0 && int(binary.BigEndian.Uint32(body[1:5])) == len(body)-5
}

// checkConnectError: an error body, if any, is JSON with a code that
// blames the request, not the agent (for a well-framed request).
func checkConnectError(t *testing.T, path string, body []byte, framed bool) {
	t.Helper()
	if len(body) == 0 || !framed {
		return
	}
	var e struct {
		Code  string `json:"code"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return // a protobuf message, not an error
	}
	code := e.Code
	if e.Error != nil {
		code = e.Error.Code
	}
	if code == "internal" || code == "unknown" || code == "data_loss" {
		t.Fatalf("%s: Connect error %q for client input: %s", path, code, body)
	}
}

// FuzzAgentAuth: without the sandbox's token (or a signature made with
// it), every request but /health is refused with 401.
func FuzzAgentAuth(f *testing.F) {
	f.Add("wrong", "", "", "", "GET")
	f.Add("", "deadbeef", "9999999999", "root", "POST")
	f.Add("", "v1_abc", "-1", "", "GET")
	f.Add("FUZZ-TOKEN", "", "", "user", "GET")
	f.Add("fuzz-token ", "", "", "", "GET")
	h, dir := fuzzAgent(f)
	target := filepath.Join(dir, "auth-probe")
	f.Fuzz(func(t *testing.T, token, signature, expiration, username, method string) {
		if method != "GET" && method != "POST" || !validHeader(token) {
			return
		}
		q := url.Values{"path": {target}, "signature": {signature}, "signature_expiration": {expiration}, "username": {username}}
		req := httptest.NewRequest(method, "/files?"+q.Encode(), strings.NewReader("x"))
		if token != "" {
			req.Header.Set(TokenHeader, token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if token != fuzzToken && rec.Code != http.StatusUnauthorized {
			t.Fatalf("token %q signature %q expiration %q: status %d", token, signature, expiration, rec.Code)
		}
		if _, err := os.Stat(target); err == nil && token != fuzzToken {
			t.Fatalf("a request without the token wrote %s", target)
		}
		os.Remove(target)
	})
}

// validHeader reports whether v can be sent as a header value at all.
func validHeader(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00") && strings.TrimSpace(v) == v
}
