// Package client is the Go client of the SPACE public API (api/openapi.yaml).
//
// Every method takes a context first; cancelling it aborts the request, and for
// streams (command events, file watches, PTY sessions) it ends the stream.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to one spaced. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	apiKey    string
	http      *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client used for every request. It should have no
// Timeout: streams (command output, watches) last as long as their context.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client of the daemon at addr ("http://127.0.0.1:7070", or
// "127.0.0.1:7070" which means http). apiKey is sent as a bearer token; an empty
// key sends no Authorization header. An addr that cannot be parsed yields a
// client whose every call fails with that error.
func New(addr, apiKey string, opts ...Option) *Client {
	c := &Client{apiKey: apiKey, http: &http.Client{}, userAgent: "space-go-client"}
	c.base = parseAddr(addr)
	for _, o := range opts {
		o(c)
	}
	return c
}

func parseAddr(addr string) *url.URL {
	addr = strings.TrimSpace(addr)
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u
}

// endpoint builds the URL of an API path (segments are escaped) with a query.
func (c *Client) endpoint(q url.Values, segments ...string) (string, error) {
	if c.base == nil {
		return "", fmt.Errorf("invalid daemon address")
	}
	u := *c.base
	raw := u.EscapedPath()
	for _, s := range segments {
		u.Path += "/" + s
		raw += "/" + url.PathEscape(s)
	}
	u.RawPath = raw
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// newRequest builds a request with auth headers. body may be nil.
func (c *Client) newRequest(ctx context.Context, method, rawURL string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return nil, err
	}
	c.authorize(req.Header)
	return req, nil
}

func (c *Client) authorize(h http.Header) {
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		h.Set("User-Agent", c.userAgent)
	}
}

// send performs req and turns any non-2xx answer into an *APIError. The caller
// closes the body of the returned response.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call sends a JSON request (in may be nil) and decodes a JSON answer into out
// (out may be nil to discard it).
func (c *Client) call(ctx context.Context, method string, q url.Values, in, out any, segments ...string) error {
	u, err := c.endpoint(q, segments...)
	if err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeJSON(resp, out)
}

func decodeJSON(resp *http.Response, out any) error {
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s response: %w", resp.Request.URL.Path, err)
	}
	return nil
}
