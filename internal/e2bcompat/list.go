package e2bcompat

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// listV1 is GET /sandboxes: every running sandbox, filtered by metadata.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := parseMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	sbs, err := s.opts.Sandboxes.List(r.Context(), sandbox.ListFilter{States: []sandbox.State{sandbox.StateRunning}, Metadata: md})
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]listedSandboxJSON, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, listedJSON(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

// cursor is the X-Next-Token: the last sandbox of the page sent.
type cursor struct {
	T  int64  `json:"t"`
	ID string `json:"id"`
}

// listV2 is GET /v2/sandboxes: filters by metadata, state, template and
// start time, ordered by start time, paged with X-Next-Token.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	md, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	wantStates := []sandbox.State{sandbox.StateRunning}
	if states := splitList(q["state"]); len(states) > 0 {
		wantStates = nil
		for _, st := range states {
			switch st {
			case "running":
				wantStates = append(wantStates, sandbox.StateRunning)
			case "paused":
				wantStates = append(wantStates, sandbox.StatePaused, sandbox.StateResuming)
			default:
				writeStatus(w, http.StatusBadRequest, "state must be running or paused, not "+strconv.Quote(st))
				return
			}
		}
	}
	desc := true
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		desc = false
	default:
		writeStatus(w, http.StatusBadRequest, "order must be asc or desc")
		return
	}
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			writeStatus(w, http.StatusBadRequest, "limit must be between 1 and 100")
			return
		}
		limit = n
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "startedAfter must be an RFC 3339 time")
			return
		}
		after = t
	}
	var cur *cursor
	if v := q.Get("nextToken"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "invalid nextToken")
			return
		}
		cur = c
	}

	sbs, err := s.opts.Sandboxes.List(r.Context(), sandbox.ListFilter{States: wantStates, Metadata: md})
	if err != nil {
		writeError(w, r, err)
		return
	}
	template := q.Get("template")
	sbs = slices.DeleteFunc(sbs, func(sb *sandbox.Sandbox) bool {
		return (!after.IsZero() && !sb.CreatedAt.After(after)) || (template != "" && sb.Template != template)
	})
	slices.SortFunc(sbs, func(a, b *sandbox.Sandbox) int {
		c := compareKey(a.CreatedAt.UnixNano(), a.ID, b.CreatedAt.UnixNano(), b.ID)
		if desc {
			return -c
		}
		return c
	})
	w.Header().Set("X-Total-Running", strconv.Itoa(len(sbs)))
	if cur != nil {
		i := slices.IndexFunc(sbs, func(sb *sandbox.Sandbox) bool {
			c := compareKey(sb.CreatedAt.UnixNano(), sb.ID, cur.T, cur.ID)
			return (desc && c < 0) || (!desc && c > 0)
		})
		if i < 0 {
			sbs = nil
		} else {
			sbs = sbs[i:]
		}
	}
	if len(sbs) > limit {
		last := sbs[limit-1]
		w.Header().Set("X-Next-Token", encodeCursor(cursor{T: last.CreatedAt.UnixNano(), ID: last.ID}))
		sbs = sbs[:limit]
	}
	out := make([]listedSandboxJSON, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, listedJSON(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func compareKey(t1 int64, id1 string, t2 int64, id2 string) int {
	switch {
	case t1 < t2:
		return -1
	case t1 > t2:
		return 1
	}
	return strings.Compare(id1, id2)
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// splitList accepts both state=a,b and state=a&state=b.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// parseMetadataQuery reads E2B's metadata filter: a query string of k=v
// pairs, sent URL-encoded inside the metadata parameter; the SDKs also
// percent-encode each key and value first, so each is unescaped once more.
func parseMetadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "metadata must be a query string of key=value pairs")
	}
	md := make(map[string]string, len(vals))
	for k, vs := range vals {
		if len(vs) == 0 {
			continue
		}
		md[unescapeOnce(k)] = unescapeOnce(vs[len(vs)-1])
	}
	return md, nil
}

func unescapeOnce(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}
