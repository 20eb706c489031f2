package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spacesandbox/space/client/apitypes"
)

// BuildRequest asks for a template build: a Dockerfile, or From, Steps and
// Start. COPY steps take files from Context, an uploaded file set.
type BuildRequest struct {
	Name       string            `json:"name"`
	Tags       []string          `json:"tags,omitempty"`
	Dockerfile string            `json:"dockerfile,omitempty"`
	BuildArgs  map[string]string `json:"build_args,omitempty"`
	From       *BuildFrom        `json:"from,omitempty"`
	Steps      []BuildStep       `json:"steps,omitempty"`
	Start      *BuildStart       `json:"start,omitempty"`
	Context    string            `json:"context,omitempty"`
	NoCache    bool              `json:"no_cache,omitempty"`
	CPU        int               `json:"cpu,omitempty"`
	MemoryMB   int               `json:"memory_mb,omitempty"`
	DiskMB     int               `json:"disk_mb,omitempty"`
	Network    *Network          `json:"network,omitempty"`
}

// BuildFrom is a build's source: one of a template, a registry image (with
// credentials) or an uploaded image archive.
type BuildFrom struct {
	Template string        `json:"template,omitempty"`
	Image    string        `json:"image,omitempty"`
	Archive  string        `json:"archive,omitempty"`
	Registry *RegistryAuth `json:"registry,omitempty"`
}

// RegistryAuth is a registry credential.
type RegistryAuth = apitypes.RegistryAuth

// BuildStep is one step: one of Run (with User), Argv, Copy, Env, Workdir,
// or User alone.
type BuildStep struct {
	Run     string            `json:"run,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	User    string            `json:"user,omitempty"`
	Copy    *BuildCopy        `json:"copy,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	NoCache bool              `json:"no_cache,omitempty"`
}

// BuildCopy copies files of the context (or of Files) into the image.
type BuildCopy struct {
	Src   []string `json:"src"`
	Dest  string   `json:"dest"`
	Owner string   `json:"owner,omitempty"`
	Mode  string   `json:"mode,omitempty"`
	Files string   `json:"files,omitempty"`
}

// BuildStart is the start command and its ready check.
type BuildStart struct {
	Cmd   string     `json:"cmd"`
	Ready BuildReady `json:"ready,omitzero"`
}

// BuildReady says when a started template is ready (at most one field).
type BuildReady = apitypes.BuildReady

// Build is a template build.
type Build struct {
	apitypes.Build
}

// Build states.
const (
	BuildStateQueued   = "queued"
	BuildStateBuilding = "building"
	BuildStateReady    = "ready"
	BuildStateFailed   = "error"
	BuildStateCanceled = "canceled"
)

// Done reports whether the build will not change any more.
func (b *Build) Done() bool {
	return b.State == BuildStateReady || b.State == BuildStateFailed || b.State == BuildStateCanceled
}

// BuildError says why a build failed.
type BuildError = apitypes.BuildError

// LogEntry is one line of a build's log: step 0 is the source, 1..n the
// steps, n+1 the start command and the end.
type LogEntry = apitypes.BuildLogEntry

// Template is a template and its tags.
type Template = apitypes.Template

// TemplateTag is a tag and the build it points at.
type TemplateTag = apitypes.TemplateTag

// HasFiles reports whether a file set with this SHA-256 is uploaded.
func (c *Client) HasFiles(ctx context.Context, hash string) (bool, error) {
	err := c.call(ctx, http.MethodGet, nil, nil, nil, "v1", "files", hash)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// PutFiles uploads a file set (a tar, gzip or not) of size bytes whose
// SHA-256 is hash.
func (c *Client) PutFiles(ctx context.Context, hash string, r io.Reader, size int64) error {
	u, err := c.endpoint(nil, "v1", "files", hash)
	if err != nil {
		return err
	}
	req, err := c.newRequest(ctx, http.MethodPut, u, r)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeJSON(resp, nil)
}

// StartBuild queues a build.
func (c *Client) StartBuild(ctx context.Context, req BuildRequest) (*Build, error) {
	var b Build
	if err := c.call(ctx, http.MethodPost, nil, req, &b, "v1", "builds"); err != nil {
		return nil, err
	}
	return &b, nil
}

// GetBuild returns one build.
func (c *Client) GetBuild(ctx context.Context, id string) (*Build, error) {
	var b Build
	if err := c.call(ctx, http.MethodGet, nil, nil, &b, "v1", "builds", id); err != nil {
		return nil, err
	}
	return &b, nil
}

// ListBuilds lists builds, of one template when template is not empty.
func (c *Client) ListBuilds(ctx context.Context, template string) ([]Build, error) {
	var q url.Values
	if template != "" {
		q = url.Values{"template": {template}}
	}
	var out struct {
		Builds []Build `json:"builds"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "builds"); err != nil {
		return nil, err
	}
	return out.Builds, nil
}

// CancelBuild stops a build.
func (c *Client) CancelBuild(ctx context.Context, id string) (*Build, error) {
	var b Build
	if err := c.call(ctx, http.MethodPost, nil, nil, &b, "v1", "builds", id, "cancel"); err != nil {
		return nil, err
	}
	return &b, nil
}

// BuildLogStream reads a build's log as it is written.
type BuildLogStream struct {
	body io.ReadCloser
	sse  *sseReader
	// LastID is the id of the last log entry read (resume with it).
	LastID uint64
	// End is the build as it ended, once Next returned io.EOF after it.
	End *Build
}

// BuildLogs follows build id's log from after (0: the start).
func (c *Client) BuildLogs(ctx context.Context, id string, after uint64) (*BuildLogStream, error) {
	u, err := c.endpoint(nil, "v1", "builds", id, "logs")
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	return &BuildLogStream{body: resp.Body, sse: newSSEReader(resp.Body), LastID: after}, nil
}

// Next returns the next entry; io.EOF once the build ended (End is set).
func (s *BuildLogStream) Next() (*LogEntry, error) {
	for {
		ev, err := s.sse.next()
		if err != nil {
			return nil, err
		}
		switch ev.Event {
		case "log":
			var e LogEntry
			if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
				return nil, fmt.Errorf("decode build log: %w", err)
			}
			s.LastID = uint64(e.Seq) + 1
			return &e, nil
		case "end":
			var b Build
			if err := json.Unmarshal([]byte(ev.Data), &b); err != nil {
				return nil, fmt.Errorf("decode build end: %w", err)
			}
			s.End = &b
			return nil, io.EOF
		}
	}
}

// Close ends the stream.
func (s *BuildLogStream) Close() error { return s.body.Close() }

// ListTemplates lists templates.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out struct {
		Templates []Template `json:"templates"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "templates"); err != nil {
		return nil, err
	}
	return out.Templates, nil
}

// GetTemplate returns one template.
func (c *Client) GetTemplate(ctx context.Context, name string) (*Template, error) {
	var t Template
	if err := c.call(ctx, http.MethodGet, nil, nil, &t, "v1", "templates", name); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate deletes a template's name and tags.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "templates", name)
}

// SetTag points tag of template name at a build, or at what from
// ("name:tag") points at.
func (c *Client) SetTag(ctx context.Context, name, tag, build, from string) (*Template, error) {
	in := map[string]string{}
	if build != "" {
		in["build"] = build
	}
	if from != "" {
		in["from"] = from
	}
	var t Template
	if err := c.call(ctx, http.MethodPut, nil, in, &t, "v1", "templates", name, "tags", tag); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTag removes a tag.
func (c *Client) DeleteTag(ctx context.Context, name, tag string) error {
	return c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "templates", name, "tags", tag)
}
