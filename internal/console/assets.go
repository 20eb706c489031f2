package console

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// dist is the built page (scripts/build-console.sh writes it from
// web/console; TestBundleIsCurrent fails when it is older than the sources).
//
//go:embed dist
var dist embed.FS

// assets are the page's files, each with a version (a hash of its bytes)
// that index.html names, so a browser may keep them for good.
type assets struct {
	index   []byte // index.html with each asset's version in its URL
	files   map[string][]byte
	gzipped map[string][]byte // compressed once at start, for browsers that take gzip
	version map[string]string
}

func loadAssets() (*assets, error) {
	a := &assets{files: map[string][]byte{}, gzipped: map[string][]byte{}, version: map[string]string{}}
	entries, err := fs.ReadDir(dist, "dist/assets")
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	for _, e := range entries {
		data, err := dist.ReadFile("dist/assets/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("console assets: %w", err)
		}
		sum := sha256.Sum256(data)
		a.files[e.Name()] = data
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(data)
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("console assets: %w", err)
		}
		a.gzipped[e.Name()] = gz.Bytes()
		a.version[e.Name()] = hex.EncodeToString(sum[:8])
	}
	index, err := dist.ReadFile("dist/index.html")
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	for name, v := range a.version {
		index = bytes.ReplaceAll(index, []byte("assets/"+name+"\""), []byte("assets/"+name+"?v="+v+"\""))
	}
	a.index = index
	return a, nil
}

// nonceAttr is the placeholder index.html carries where each response's
// style nonce goes.
const nonceAttr = "{{nonce}}"

// contentSecurityPolicy allows the console's own scripts only (no inline
// or eval'd script), its own styles plus <style> elements that carry this
// response's nonce (xterm.js makes some; the page hands them the nonce),
// and connections to its own origin (the API through /ui/api, SSE and the
// terminal's WebSocket).
func contentSecurityPolicy(nonce string) string {
	return strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'",
		"style-src 'self' 'nonce-" + nonce + "'",
		"img-src 'self' data: blob:",
		"font-src 'self'",
		"connect-src 'self'",
		"base-uri 'none'",
		"form-action 'self'",
		"frame-ancestors 'none'",
	}, "; ")
}

func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 18)
	rand.Read(b)
	nonce := base64.RawStdEncoding.EncodeToString(b)
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy(nonce))
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.Write(bytes.ReplaceAll(c.assets.index, []byte(nonceAttr), []byte(nonce)))
}

func (c *Console) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	data, ok := c.assets.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		h.Set("Content-Type", ct)
	}
	if v := r.URL.Query().Get("v"); v != "" && v == c.assets.version[name] {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	h.Set("Content-Security-Policy", "default-src 'none'")
	h.Set("Vary", "Accept-Encoding")
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Content-Encoding", "gzip")
		data = c.assets.gzipped[name]
	}
	w.Write(data)
}
