package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUploadStreams proves the body goes out as it is produced: the server
// answers after reading the first chunk, while the second is not written yet.
func TestUploadStreams(t *testing.T) {
	firstSeen := make(chan struct{})
	var got bytes.Buffer
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Query().Get("path") != "/tmp/f" {
			t.Errorf("%s %s", r.Method, r.URL)
		}
		if r.Header.Get("Content-Type") != "application/octet-stream" || r.ContentLength != -1 {
			t.Errorf("content-type %q length %d", r.Header.Get("Content-Type"), r.ContentLength)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("read first chunk: %v", err)
		}
		got.Write(buf)
		close(firstSeen)
		io.Copy(&got, r.Body)
		fmt.Fprintf(w, `{"name":"f","path":"/tmp/f","type":"file","size":%d}`, got.Len())
	})
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first"))
		select {
		case <-firstSeen:
		case <-time.After(5 * time.Second):
			pw.CloseWithError(fmt.Errorf("server never saw the first chunk: the body was buffered"))
			return
		}
		pw.Write([]byte(" second"))
		pw.Close()
	}()
	e, err := c.Upload(context.Background(), "s1", "/tmp/f", pr)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "first second" || e.Size != 12 || e.Type != EntryFile {
		t.Errorf("server got %q, entry %+v", got.String(), e)
	}
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestUploadLengthAndReaderNotClosed(t *testing.T) {
	tests := []struct {
		name       string
		body       io.Reader
		wantLength int64
	}{
		{"bytes reader has a length", bytes.NewReader([]byte("abc")), 3},
		{"strings reader has a length", strings.NewReader("abcd"), 4},
		{"a ReadCloser is streamed and left open", &closeTracker{Reader: strings.NewReader("ab")}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if r.ContentLength != tt.wantLength {
					t.Errorf("length %d, want %d", r.ContentLength, tt.wantLength)
				}
				fmt.Fprint(w, `{"name":"f","path":"/f","type":"file"}`)
			})
			if _, err := c.Upload(context.Background(), "s1", "/f", tt.body); err != nil {
				t.Fatal(err)
			}
			if ct, ok := tt.body.(*closeTracker); ok && ct.closed {
				t.Error("Upload closed the caller's reader")
			}
		})
	}
}

func TestUploadDiskFull(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusInsufficientStorage, "resource_exhausted", "no space left on device")
	})
	_, err := c.Upload(context.Background(), "s1", "/f", strings.NewReader("x"))
	if !IsResourceExhausted(err) || ErrorStatus(err) != 507 {
		t.Fatalf("err = %v", err)
	}
}

func TestDownload(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes/s1/files" || r.URL.Query().Get("path") != "a b.txt" {
			t.Errorf("%s %s", r.Method, r.URL)
		}
		fmt.Fprint(w, "content")
	})
	rc, err := c.Download(context.Background(), "s1", "a b.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if string(b) != "content" {
		t.Errorf("got %q", b)
	}
}

func TestWatch(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/s1/files/watch" || r.URL.Query().Get("recursive") != "true" {
			t.Errorf("%s", r.URL)
		}
		s := startSSE(w)
		s.event(1, "fs", `{"name":"a.txt","type":"create"}`)
		s.raw(": keepalive\n\n")
		s.event(2, "other", `{}`)
		s.event(3, "fs", `{"name":"d/b","type":"remove"}`)
	})
	ws, err := c.Watch(context.Background(), "s1", "/home/user", true)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var got []string
	for {
		ev, err := ws.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s:%s", ev.ID, ev.Type, ev.Name))
	}
	if strings.Join(got, " ") != "1:create:a.txt 3:remove:d/b" {
		t.Errorf("got %v", got)
	}
}
