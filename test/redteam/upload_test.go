package redteam

// Upload attempts (issue 27 §3): bodies and archives that would fill the
// host's disk through spaced itself. A daemon of their own runs with small
// limits (an 8 MiB upload, a 32 MiB expanded context) so that "over the
// limit" costs the shared machine little; each attempt measures, with du,
// the directories spaced writes uploads to (its template work dir and its
// object store) while the request is still open.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

const (
	upMaxUpload  = 8 << 20  // SPACE_TEMPLATE_MAX_UPLOAD of the uploads daemon
	upMaxContext = 32 << 20 // its SPACE_TEMPLATE_MAX_CONTEXT
	// upSlack is what the measured directories may grow by for reasons
	// of their own (the store's files, logs) during one attempt.
	upSlack = 1 << 20
)

const uploadStops = "a per-route body limit at both APIs' edge (internal/bodylimit): a declared length over it is answered 413 before a byte is read, an undeclared one fails at the limit, and a refused body of up to 16 MiB is drained after the answer"

var upFix struct {
	once      sync.Once
	d         *harness.Daemon
	templates string // its templates dir, removed after it
	err       error
}

// uploadDaemon is the uploads' own spaced, on its own templates dir (the
// base template linked in): builds here never touch the shared one's.
func uploadDaemon(t *testing.T) *harness.Daemon {
	t.Helper()
	harness.Need(t)
	upFix.once.Do(func() {
		dir, err := os.MkdirTemp("", "rt-upload-templates-")
		if err != nil {
			upFix.err = err
			return
		}
		upFix.templates = dir
		shared := filepath.Join(testenv.TemplatesDir(), "base")
		entries, err := os.ReadDir(shared)
		if err == nil {
			err = os.Mkdir(filepath.Join(dir, "base"), 0o755)
		}
		for _, e := range entries {
			if err == nil {
				err = os.Symlink(filepath.Join(shared, e.Name()), filepath.Join(dir, "base", e.Name()))
			}
		}
		if err != nil {
			upFix.err = fmt.Errorf("templates dir: %w", err)
			return
		}
		upFix.d, upFix.err = harness.Start(harness.Options{
			Name: "uploads", CIDR: "10.245.28.0/22", NoPool: true, BootTimeout: 10 * time.Second, TemplatesDir: dir,
			Env: []string{"SPACE_LOG_LEVEL=info", "SPACE_TEMPLATE_MAX_UPLOAD=" + strconv.Itoa(upMaxUpload),
				"SPACE_TEMPLATE_MAX_CONTEXT=" + strconv.Itoa(upMaxContext)},
		})
	})
	if upFix.err != nil {
		if upFix.d != nil {
			t.Fatalf("start the uploads' spaced: %v\n%s", upFix.err, upFix.d.LogTail(40))
		}
		t.Fatalf("start the uploads' spaced: %v", upFix.err)
	}
	upFix.d.DumpOnFailure(t)
	return upFix.d
}

func uploadAttempts() []attempt {
	declared := func(id, desc string, target func(*testing.T, *harness.Daemon) (string, map[string]string)) attempt {
		return attempt{id: id, category: "resources", family: "upload-declared", desc: desc, stops: uploadStops,
			control: "a small upload (native and E2B link) is stored; a small JSON body is served",
			run: func(t *testing.T) error {
				d := uploadDaemon(t)
				path, hdr := target(t, d)
				return declaredOver(t, d, path, hdr)
			}}
	}
	nativeFiles := func(*testing.T, *harness.Daemon) (string, map[string]string) {
		return "/v1/files/" + strings.Repeat("a", 64), nil
	}
	return []attempt{
		declared("upload-declared-native-files", "PUT /v1/files/<hash> declaring Content-Length: 5 GiB, and sending 32 MiB of it without waiting", nativeFiles),
		declared("upload-declared-e2b-link", "PUT to an E2B signed upload link (/templates/base/files/<hash>/upload) declaring 5 GiB, and sending 32 MiB of it", e2bUploadLink),
		declared("upload-declared-json", "POST /v1/builds (a JSON route, 1 MiB) declaring 5 GiB, and sending 32 MiB of it", func(*testing.T, *harness.Daemon) (string, map[string]string) {
			return "/v1/builds", map[string]string{"Content-Type": "application/json"}
		}),
		{id: "upload-write-first", category: "resources", family: "upload-undeclared", desc: "a client writes a whole chunked upload 50% over the limit (12 MiB) before it reads the answer",
			stops: uploadStops, control: "the same client's 1 MiB chunked upload is read whole and answered (400: the hash is not the body's)", run: uploadWriteFirst},
		{id: "upload-lying-length", category: "resources", family: "upload-undeclared", desc: "PUT /v1/files/<hash> declaring 1 MiB and sending 24 MiB on the connection",
			stops:   "HTTP/1.1 framing: the server reads the declared length as the body and the rest as a next request, which is malformed (the upload's hash does not match what was read, and nothing is stored)",
			control: "a 1 MiB upload that declares its length is stored (201)", run: uploadLyingLength},
		{id: "upload-context-bomb", category: "resources", desc: "a gzip build context of 256 MiB of zeros (about 260 KiB uploaded) that a COPY expands",
			stops:   "the file set's expansion is bounded as it is read by SPACE_TEMPLATE_MAX_CONTEXT, the COPY's parts are charged to the tenant (at most that much at once) and removed when the step ends; every write keeps the host's disk floor (507)",
			control: "a small context's COPY builds (ready)", run: uploadContextBomb},
	}
}

// TestUploads runs the upload attempts on their own daemon.
func TestUploads(t *testing.T) {
	harness.Need(t)
	t.Cleanup(func() {
		if upFix.d != nil {
			upFix.d.Shutdown()
		}
		if upFix.templates != "" {
			os.RemoveAll(upFix.templates)
		}
	})
	if err := uploadControls(t, uploadDaemon(t)); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	for _, a := range uploadAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
}

// upDirs are the directories spaced writes uploads to.
func upDirs(d *harness.Daemon) []string {
	return []string{filepath.Join(d.DataDir, "template-work"), filepath.Join(d.DataDir, "objects")}
}

// du is the bytes under dirs (du -sb).
func du(t *testing.T, dirs ...string) int64 {
	t.Helper()
	out, err := exec.Command("du", append([]string{"-sbc"}, dirs...)...).Output()
	if err != nil {
		t.Fatalf("du %v: %v", dirs, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	n, _ := strconv.ParseInt(strings.Fields(lines[len(lines)-1])[0], 10, 64)
	return n
}

// upAnswer is a response read off a raw connection.
type upAnswer struct {
	status int
	body   string
	err    error
}

func readAnswer(c net.Conn) upAnswer {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return upAnswer{err: err}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return upAnswer{status: resp.StatusCode, body: string(b)}
}

// dial opens a raw connection to d with a deadline that only keeps a
// broken run from hanging.
func dial(t *testing.T, d *harness.Daemon) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	t.Cleanup(func() { c.Close() })
	return c
}

// declaredOver sends PUT/POST path declaring 5 GiB and writes 32 MiB of
// body (stopping at the first failed write) while reading the answer on
// the side, measuring what the upload dirs grew by as it goes; then it
// half-closes and takes the answer.
func declaredOver(t *testing.T, d *harness.Daemon, path string, hdr map[string]string) error {
	method := "PUT"
	if strings.HasPrefix(path, "/v1/builds") {
		method = "POST"
	}
	before := du(t, upDirs(d)...)
	c := dial(t, d)
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n", method, path, d.Addr, d.APIKey, int64(5)<<30)
	for k, v := range hdr {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v)
	}
	head.WriteString("\r\n")
	got := make(chan upAnswer, 1)
	go func() { got <- readAnswer(c) }()
	if _, err := io.WriteString(c, head.String()); err != nil {
		return err
	}
	// What spaced writes of it is measured after every MiB sent: an
	// upload refused late is written, then removed.
	chunk := make([]byte, 1<<20)
	sent := 0
	var grew int64
	for ; sent < 32; sent++ {
		if _, err := c.Write(chunk); err != nil {
			break
		}
		grew = max(grew, du(t, upDirs(d)...)-before)
	}
	c.(*net.TCPConn).CloseWrite()
	a := <-got
	t.Logf("%s %s: sent %d MiB, answer %d %s (err %v); upload dirs grew by up to %d bytes", method, path, sent, a.status, strings.TrimSpace(a.body), a.err, grew)
	if a.err != nil {
		return fmt.Errorf("no answer: %v", a.err)
	}
	if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(a.body, "limit") {
		return fmt.Errorf("answer %d %s, want 413 naming the limit", a.status, a.body)
	}
	if grew > upSlack {
		return fmt.Errorf("spaced wrote %d bytes of a body it refused", grew)
	}
	return nil
}

// e2bUploadLink is the E2B SDKs' upload link of a file set for template
// base, asked for as they do.
func e2bUploadLink(t *testing.T, d *harness.Daemon) (string, map[string]string) {
	t.Helper()
	status, _, body, err := raw(harness.Ctx(t, 30*time.Second), d, "GET", "/templates/base/files/"+strings.Repeat("b", 64), nil,
		map[string]string{"Authorization": "", "X-API-KEY": d.APIKey})
	if err != nil || status != http.StatusCreated {
		t.Fatalf("upload link: %d %s %v", status, body, err)
	}
	var link struct {
		URL string `json:"url"`
	}
	json.Unmarshal(body, &link)
	u, err := url.Parse(link.URL)
	if err != nil || u.Path == "" {
		t.Fatalf("upload link %q: %v", link.URL, err)
	}
	return u.RequestURI(), nil
}

// uploadControls: what the attempts refuse past the limit works within
// it, on each route they use.
func uploadControls(t *testing.T, d *harness.Daemon) error {
	ctx := harness.Ctx(t, time.Minute)
	data := bytes.Repeat([]byte("x"), 1<<20)
	sum := sha256.Sum256(data)
	if err := d.Client.PutFiles(ctx, hex.EncodeToString(sum[:]), bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("a 1 MiB native upload: %v", err)
	}
	link, _ := e2bUploadLink(t, d)
	status, _, body, err := raw(ctx, d, "PUT", link, bytes.NewReader(data), map[string]string{"Authorization": ""})
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("a 1 MiB upload to an E2B link: %d %s %v", status, body, err)
	}
	status, _, body, err = raw(ctx, d, "POST", "/v1/builds", strings.NewReader(`{"name":"x"}`), nil)
	if err != nil || status != http.StatusBadRequest || !strings.Contains(string(body), "dockerfile or a from") {
		return fmt.Errorf("a small JSON body is not read by its handler: %d %s %v", status, body, err)
	}
	return nil
}

// uploadWriteFirst: a chunked upload over the limit, written whole before
// the answer is read, gets the 413 (not a reset), and nothing is stored.
func uploadWriteFirst(t *testing.T) error {
	d := uploadDaemon(t)
	send := func(size int) upAnswer {
		c := dial(t, d)
		w := bufio.NewWriter(c)
		fmt.Fprintf(w, "PUT /v1/files/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n\r\n", strings.Repeat("c", 64), d.Addr, d.APIKey)
		chunk := bytes.Repeat([]byte("y"), 64<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
		}
		w.WriteString("0\r\n\r\n")
		if err := w.Flush(); err != nil {
			return upAnswer{err: fmt.Errorf("writing the body: %w", err)}
		}
		return readAnswer(c)
	}
	// The control: within the limit the same client is answered (the
	// hash is not the body's, so 400 saying so: the body was read whole).
	if a := send(1 << 20); a.err != nil || a.status != http.StatusBadRequest || !strings.Contains(a.body, "SHA-256") {
		return fmt.Errorf("control: a 1 MiB chunked upload: %d %s %v", a.status, a.body, a.err)
	}
	before := du(t, upDirs(d)...)
	a := send(upMaxUpload * 3 / 2)
	grew := du(t, upDirs(d)...) - before
	t.Logf("12 MiB chunked, written first: %d %s (err %v); dirs grew by %d", a.status, strings.TrimSpace(a.body), a.err, grew)
	if a.err != nil {
		return fmt.Errorf("no answer: %v", a.err)
	}
	if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(a.body, "limit") {
		return fmt.Errorf("answer %d %s, want 413 naming the limit", a.status, a.body)
	}
	if grew > upSlack {
		return fmt.Errorf("spaced kept %d bytes of a refused upload", grew)
	}
	return nil
}

// uploadLyingLength: declaring 1 MiB and sending 24 MiB stores nothing
// and writes no more than the declared length.
func uploadLyingLength(t *testing.T) error {
	d := uploadDaemon(t)
	before := du(t, upDirs(d)...)
	c := dial(t, d)
	got := make(chan upAnswer, 1)
	go func() { got <- readAnswer(c) }()
	fmt.Fprintf(c, "PUT /v1/files/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", strings.Repeat("d", 64), d.Addr, d.APIKey, 1<<20)
	chunk := make([]byte, 1<<20)
	sent := 0
	for ; sent < 24; sent++ {
		if _, err := c.Write(chunk); err != nil {
			break
		}
	}
	grew := du(t, upDirs(d)...) - before
	c.(*net.TCPConn).CloseWrite()
	a := <-got
	t.Logf("declared 1 MiB, sent %d MiB: %d %s (err %v); dirs grew by %d", sent, a.status, strings.TrimSpace(a.body), a.err, grew)
	if a.err != nil || a.status/100 != 4 {
		return fmt.Errorf("answer %d %s %v, want a 4xx", a.status, a.body, a.err)
	}
	if grew > upSlack {
		return fmt.Errorf("spaced kept %d bytes", grew)
	}
	return nil
}

// bombContext is a gzip tar of one file of n zeros.
func bombContext(n int64) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: n, Typeflag: tar.TypeReg})
	zero := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zero)) {
		tw.Write(zero[:min(left, int64(len(zero)))])
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// uploadContextBomb: the bomb's build fails saying which limit, the work
// dir never holds more than that limit of it (sampled with du while the
// build runs), and holds none of it after; a small context builds.
func uploadContextBomb(t *testing.T) error {
	d := uploadDaemon(t)
	ctx := harness.Ctx(t, 5*time.Minute)
	build := func(data []byte, name string) (*client.Build, int64, error) {
		sum := sha256.Sum256(data)
		hash := hex.EncodeToString(sum[:])
		if err := d.Client.PutFiles(ctx, hash, bytes.NewReader(data), int64(len(data))); err != nil {
			return nil, 0, fmt.Errorf("upload: %w", err)
		}
		work := filepath.Join(d.DataDir, "template-work")
		before := du(t, work)
		stop, peak := make(chan struct{}), make(chan int64)
		go func() {
			var most int64
			for {
				select {
				case <-stop:
					peak <- most
					return
				case <-time.After(100 * time.Millisecond):
					most = max(most, du(t, work)-before)
				}
			}
		}()
		b := rtBuild(t, d, nil, client.BuildRequest{Name: name, Context: hash, NoCache: true,
			From:  &client.BuildFrom{Template: "base"},
			Steps: []client.BuildStep{{Copy: &client.BuildCopy{Src: []string{"."}, Dest: "/app/"}}}})
		close(stop)
		return b, <-peak, nil
	}
	small, _, err := build(bombContext(64<<10), "rt-upload-small-"+harness.RandHex(4))
	if err != nil {
		return err
	}
	if small.State != client.BuildStateReady {
		return fmt.Errorf("control: a 64 KiB context's build ended %s: %+v", small.State, small.Error)
	}
	data := bombContext(256 << 20)
	work := filepath.Join(d.DataDir, "template-work")
	before := du(t, work)
	b, peak, err := build(data, "rt-upload-bomb-"+harness.RandHex(4))
	if err != nil {
		return err
	}
	after := du(t, work) - before
	t.Logf("a %d-byte gzip of 256 MiB: build %s (%+v); the work dir grew by at most %d bytes while it ran, %d after", len(data), b.State, b.Error, peak, after)
	if b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "SPACE_TEMPLATE_MAX_CONTEXT") {
		return fmt.Errorf("the bomb's build ended %s (%+v), want an error naming SPACE_TEMPLATE_MAX_CONTEXT", b.State, b.Error)
	}
	if peak > upMaxContext+upSlack {
		return fmt.Errorf("the work dir grew by %d bytes, more than the context limit of %d", peak, upMaxContext)
	}
	if after > upSlack {
		return fmt.Errorf("the bomb's build left %d bytes in the work dir", after)
	}
	return nil
}
