package egress

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/spacesandbox/space/internal/egress/secrets"
)

// placeholderRe matches secrets.NewPlaceholder's output.
var placeholderRe = regexp.MustCompile(secrets.PlaceholderPrefix + `[a-z0-9][a-z0-9_-]*-[0-9a-f]{16}`)

// maxScannedBody bounds the request bodies searched for placeholders.
const maxScannedBody = 1 << 20

// applySecrets puts the sandbox's credentials into req, which is for host
// (the name the connection was allowed for; "" when none) and port: every
// placeholder in the headers, the URL and a body of known length up to
// maxScannedBody is replaced by its value, and configured headers are
// added, but only when the destination is the secret's binding. A
// placeholder bound elsewhere (or unknown) refuses the whole request.
// Then the policy's header rules for host are applied.
func (g *Gateway) applySecrets(c *conn, req *http.Request, host string) error {
	if g.cfg.Secrets == nil && len(c.sb.Policy.Headers) == 0 {
		return nil
	}
	var body []byte
	if req.ContentLength > 0 && req.ContentLength <= maxScannedBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, req.ContentLength))
		if err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		req.Body.Close()
		body = b
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	found := map[string]bool{}
	for _, s := range append(headerValues(req), req.URL.RawQuery, req.URL.Path, req.URL.RawPath, string(body)) {
		if !strings.Contains(s, secrets.PlaceholderPrefix) {
			continue
		}
		ps := placeholderRe.FindAllString(s, -1)
		if len(ps) == 0 {
			return fmt.Errorf("malformed secret placeholder")
		}
		for _, p := range ps {
			found[p] = true
		}
	}
	if len(found) > 0 && g.cfg.Secrets == nil {
		return fmt.Errorf("secret placeholder, and no secrets here")
	}
	values := map[string]string{}
	for p := range found {
		name, ok := c.sb.Secrets[p]
		if !ok {
			return fmt.Errorf("placeholder %s is not one of this sandbox's", p)
		}
		meta, value, err := g.cfg.Secrets.Open(name)
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		if !bound(meta, host, c.orig.Port(), req) {
			return fmt.Errorf("placeholder of secret %s sent to %s:%d%s, outside its binding", name, host, c.orig.Port(), req.URL.Path)
		}
		values[p] = value
	}
	for p, v := range values {
		replaceAll(req, p, v)
	}
	if len(values) > 0 && body != nil {
		for p, v := range values {
			body = bytes.ReplaceAll(body, []byte(p), []byte(v))
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	injected := map[string]bool{}
	for p := range values {
		injected[c.sb.Secrets[p]] = true
	}
	for _, name := range c.sb.secretNames() {
		if g.cfg.Secrets == nil {
			break
		}
		meta, ok := g.cfg.Secrets.Get(name)
		if !ok || meta.Header == "" || !bound(meta, host, c.orig.Port(), req) {
			continue
		}
		_, value, err := g.cfg.Secrets.Open(name)
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		req.Header.Set(meta.Header, strings.ReplaceAll(meta.HeaderFormat, "{secret}", value))
		injected[name] = true
	}
	for name := range injected {
		g.log.Info("egress injected", "sandbox", c.sb.ID, "tenant", c.sb.Tenant, "secret", name, "host", host, "port", c.orig.Port(), "path", req.URL.Path)
	}
	if hs := c.sb.Policy.Headers[host]; host != "" && len(hs) > 0 {
		names := make([]string, 0, len(hs))
		for k, v := range hs {
			req.Header.Set(k, v)
			names = append(names, k)
		}
		g.log.Info("egress injected", "sandbox", c.sb.ID, "tenant", c.sb.Tenant, "headers", names, "host", host, "port", c.orig.Port(), "path", req.URL.Path)
	}
	return nil
}

// bound: the request goes where the secret may go. A path with ".."
// could leave the prefix once the server cleans it, so it never matches.
func bound(m secrets.Meta, host string, port uint16, req *http.Request) bool {
	if host == "" || host != m.Host || (m.Port != 0 && m.Port != port) {
		return false
	}
	if m.PathPrefix == "" {
		return true
	}
	return !strings.Contains(req.URL.Path, "..") && strings.HasPrefix(req.URL.Path, m.PathPrefix)
}

func headerValues(req *http.Request) []string {
	var out []string
	for k, vs := range req.Header {
		out = append(out, k)
		out = append(out, vs...)
	}
	return out
}

func replaceAll(req *http.Request, old, value string) {
	for k, vs := range req.Header {
		for i, v := range vs {
			vs[i] = strings.ReplaceAll(v, old, value)
		}
		req.Header[k] = vs
	}
	req.URL.RawQuery = strings.ReplaceAll(req.URL.RawQuery, old, value)
	req.URL.Path = strings.ReplaceAll(req.URL.Path, old, value)
	req.URL.RawPath = strings.ReplaceAll(req.URL.RawPath, old, value)
}
