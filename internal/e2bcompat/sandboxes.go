package e2bcompat

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Timeouts E2B applies when a request names none.
const (
	defaultTimeoutV1      = 15 * time.Second
	defaultTimeoutV2      = 300 * time.Second
	defaultConnectTimeout = 300 * time.Second
)

func (s *Server) create(v2 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req newSandbox
		if err := decodeJSON(w, r, &req, false); err != nil {
			writeError(w, r, err)
			return
		}
		if msg := unsupported(r, &req, s.opts.IdempotencyKeys); msg != "" {
			writeStatus(w, http.StatusNotImplemented, msg)
			return
		}
		// The SDKs start the MCP gateway themselves (mcp-gateway --config in
		// the sandbox, see internal/mcpgateway): spaced only checks the
		// config's shape and keeps none of it (its settings may hold keys).
		if mcp := strings.TrimSpace(string(req.MCP)); mcp != "" && mcp != "null" && !strings.HasPrefix(mcp, "{") {
			writeStatus(w, http.StatusBadRequest, "mcp must be a JSON object of MCP server names to their settings")
			return
		}
		timeout := defaultTimeoutV1
		if v2 {
			timeout = defaultTimeoutV2
		}
		var ok bool
		if timeout, ok = timeoutOr(req.Timeout, timeout); !ok {
			writeStatus(w, http.StatusBadRequest, badTimeout)
			return
		}
		// v2 is always secured; v1 only when secure is not explicitly false.
		secure := v2 || req.Secure == nil || *req.Secure
		policy, err := toPolicy(req.AllowInternetAccess, req.Network)
		if err != nil {
			writeError(w, r, err)
			return
		}
		autoPause := req.AutoPause != nil && *req.AutoPause
		create := sandbox.CreateRequest{
			Template: strings.ToLower(req.TemplateID), Timeout: timeout,
			Env: req.EnvVars, Metadata: req.Metadata,
			OpenAccess: !secure, Network: policy,
			AutoPause:  autoPause,
			AutoResume: req.AutoResume != nil && req.AutoResume.Enabled,
			// autoPauseMemory governs the auto-pause only.
			AutoPauseDiskOnly: autoPause && req.AutoPauseMemory != nil && !*req.AutoPauseMemory,
			Volumes:           toMounts(req.VolumeMounts),
		}
		sb, err := s.opts.Sandboxes.Create(r.Context(), create)
		if err != nil && errdefs.Class(err) == errdefs.ErrNotFound {
			// Not a template: E2B starts a sandbox from a snapshot by
			// naming the snapshot as the template.
			if snap, serr := s.opts.Snapshots.GetSnapshot(r.Context(), create.Template); serr == nil {
				create.Template, create.Snapshot = "", snap.ID
				sb, err = s.opts.Sandboxes.Create(r.Context(), create)
			}
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusCreated, s.sandboxJSON(r, sb, sb.AccessToken))
	}
}

// unsupported names a create option that would silently behave differently
// here, so it is refused (501) rather than ignored.
func unsupported(r *http.Request, req *newSandbox, idempotencyKeys bool) string {
	switch {
	case req.IAM != nil && len(req.IAM.Tokens) > 0:
		return "workload identity (iam tokens) is not supported by spaced"
	case r.Header.Get("Idempotency-Key") != "" && !idempotencyKeys:
		return "idempotent creates (Idempotency-Key, idempotency_key) are not supported by a single spaced (only in cluster mode): a retried create would make a second sandbox"
	}
	return unsupportedNetwork(req.Network)
}

// unsupportedNetwork names a network setting spaced does not act on (the
// create's and the update's), so it is refused (501) rather than stored
// and ignored: traffic meant for the user's SOCKS5 proxy would go out
// directly, say. A field sent as null counts as not sent.
func unsupportedNetwork(n *networkConfig) string {
	switch {
	case n == nil:
	case len(n.EgressProxy) > 0 && string(n.EgressProxy) != "null":
		return "network.egressProxy (tunnelling egress through a SOCKS5 proxy) is not supported by spaced"
	case n.DNSServers != nil:
		return "network.dnsServers is not supported by spaced: sandboxes resolve names through spaced's gateway, which answers only names the sandbox's policy lets it reach"
	case n.MaskRequestHost != nil:
		return "network.maskRequestHost is not supported by spaced: requests reach a sandbox's ports with the Host they were sent with"
	case n.HTTPSPorts != nil:
		return "network.httpsPorts is not supported by spaced: the proxy speaks plain HTTP to a sandbox's ports"
	}
	return ""
}

func (s *Server) sandboxJSON(r *http.Request, sb *sandbox.Sandbox, token string) sandboxJSON {
	out := sandboxJSON{
		TemplateID: sb.Template, SandboxID: sb.ID, Alias: sb.Template,
		ClientID: ClientID, EnvdVersion: EnvdVersion, Domain: s.domain(r),
	}
	if !sb.OpenAccess {
		out.EnvdAccessToken = token
	}
	if privatePorts(sb.Network) {
		t := trafficToken(token)
		out.TrafficAccessToken = &t
	}
	return out
}

func listedJSON(sb *sandbox.Sandbox) listedSandboxJSON {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return listedSandboxJSON{
		TemplateID: sb.Template, Alias: sb.Template, SandboxID: sb.ID, ClientID: ClientID,
		StartedAt: sb.CreatedAt, EndAt: sb.ExpiresAt,
		CPUCount: sb.CPU, MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB,
		Metadata: md, State: e2bState(sb), EnvdVersion: EnvdVersion, VolumeMounts: fromMounts(sb.Volumes),
	}
}

// e2bState is the state E2B clients know: running or paused (a sandbox
// being resumed counts as paused until it runs).
func e2bState(sb *sandbox.Sandbox) string {
	if sb.State == sandbox.StatePaused || sb.State == sandbox.StateResuming {
		return "paused"
	}
	return "running"
}

// running returns a running sandbox, or NotFound.
func (s *Server) running(r *http.Request, id string) (*sandbox.Sandbox, error) {
	sb, err := s.opts.Sandboxes.Get(r.Context(), id)
	if err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			return nil, notRunning(id)
		}
		return nil, err
	}
	if sb.State != sandbox.StateRunning {
		return nil, notRunning(id)
	}
	return sb, nil
}

func (s *Server) detail(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, err := s.opts.Sandboxes.Get(r.Context(), id)
	if err == nil && sb.State != sandbox.StatePaused {
		sb, err = s.running(r, id)
	}
	if err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			err = notRunning(id)
		}
		writeError(w, r, err)
		return
	}
	var t sandbox.Target
	if sb.State == sandbox.StateRunning {
		if t, err = s.opts.Targets.Target(id); err != nil {
			writeError(w, r, err)
			return
		}
	}
	out := sandboxDetailJSON{
		listedSandboxJSON:   listedJSON(sb),
		AllowInternetAccess: sb.Network != nil && (sb.Network.AllowInternet == nil || *sb.Network.AllowInternet),
		Domain:              s.domain(r),
		Network:             fromPolicy(sb.Network),
		Lifecycle:           lifecycleJSON{AutoResume: sb.AutoResume, OnTimeout: onTimeout(sb)},
	}
	if sb.State == sandbox.StatePaused && sb.Checkpoint != nil {
		out.PauseMode = "full"
		if sb.Checkpoint.DiskOnly {
			out.PauseMode = "filesystem"
		}
	}
	if !sb.OpenAccess && t.AccessToken != "" {
		out.EnvdAccessToken = t.AccessToken
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.opts.Sandboxes.Kill(r.Context(), id); err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			err = notRunning(id)
		}
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req timeoutRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	// 0 ends the sandbox's life now (killed, or paused by its lifecycle),
	// as E2B's spec (minimum 0) and SDKs (set_timeout(0)) have it.
	d, ok := timeoutOr(req.Timeout, 0)
	if req.Timeout != nil && *req.Timeout == 0 {
		d, ok = 0, true
	}
	if req.Timeout == nil || !ok {
		writeStatus(w, http.StatusBadRequest, "timeout must be 0 (end now) or a positive number of seconds")
		return
	}
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := s.opts.Sandboxes.SetTimeout(r.Context(), id, d); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh extends the sandbox's life by duration seconds (never shortens).
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req refreshRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	d := defaultTimeoutV1
	if req.Duration != nil {
		if *req.Duration <= 0 || *req.Duration > 3600 {
			writeStatus(w, http.StatusBadRequest, "duration must be between 1 and 3600 seconds")
			return
		}
		d = time.Duration(*req.Duration) * time.Second
	}
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := s.opts.Sandboxes.ExtendTimeout(r.Context(), id, d); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func onTimeout(sb *sandbox.Sandbox) string {
	if sb.AutoPause {
		return "pause"
	}
	return "kill"
}

// connect answers for a running sandbox (200) and extends its life to at
// least timeout from now, or resumes a paused one (201), which may have
// been paused by another spaced sharing the object store.
func (s *Server) connect(v2 bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var req connectRequest
		if err := decodeJSON(w, r, &req, v2); err != nil {
			writeError(w, r, err)
			return
		}
		d := defaultConnectTimeout
		var ok bool
		if d, ok = timeoutOr(req.Timeout, d); !ok {
			writeStatus(w, http.StatusBadRequest, badTimeout)
			return
		}
		status := http.StatusOK
		if _, err := s.running(r, id); err != nil {
			// memory:false (on_resume="reboot") boots the sandbox from
			// its disk; a pause that kept memory has no disk apart from it.
			if req.Memory != nil && !*req.Memory {
				if sb, gerr := s.opts.Sandboxes.Get(r.Context(), id); gerr == nil && sb.State == sandbox.StatePaused && sb.Checkpoint != nil && !sb.Checkpoint.DiskOnly {
					writeStatus(w, http.StatusConflict, "sandbox "+id+" was paused with its memory, whose image holds its disk too: spaced cannot boot it from the disk alone; connect without memory:false (on_resume=\"reboot\")")
					return
				}
			}
			if _, rerr := s.opts.Checkpoints.Resume(r.Context(), id, d); rerr != nil {
				if errdefs.Class(rerr) == errdefs.ErrNotFound || errdefs.Class(rerr) == errdefs.ErrFailedPrecondition && errdefs.Class(err) == errdefs.ErrNotFound {
					rerr = notRunning(id)
				}
				writeError(w, r, rerr)
				return
			}
			status = http.StatusCreated
		}
		// A resume has set the timeout already: a second write would be
		// a timeout change of its own (a webhook's "updated" event).
		get := s.opts.Sandboxes.ExtendTimeout
		if status == http.StatusCreated {
			get = func(ctx context.Context, id string, _ time.Duration) (*sandbox.Sandbox, error) {
				return s.opts.Sandboxes.Get(ctx, id)
			}
		}
		sb, err := get(r.Context(), id, d)
		if err != nil {
			writeError(w, r, err)
			return
		}
		t, err := s.opts.Targets.Target(id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, status, s.sandboxJSON(r, sb, t.AccessToken))
	}
}

// pause checkpoints the sandbox (memory, processes, files; with memory:
// false the files only) and stops it: 204 once the checkpoint is complete,
// 409 when it is already paused.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req pauseRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	var opts sandbox.PauseOptions
	if req.Memory != nil && !*req.Memory {
		// E2B refuses a pause without memory when the sandbox's agent
		// does not answer.
		opts.DiskOnly, opts.RequireHealthyAgent = true, true
	}
	if req.RequireHealthyGuest != nil && *req.RequireHealthyGuest {
		opts.RequireHealthyAgent = true
	}
	if sb, err := s.opts.Sandboxes.Get(r.Context(), id); err == nil && sb.State == sandbox.StatePaused {
		writeStatus(w, http.StatusConflict, "sandbox "+id+" is already paused")
		return
	}
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := s.opts.Checkpoints.Pause(r.Context(), id, opts); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume is the older SDKs' way (newer ones resume through connect): 201
// with the sandbox, 409 when it is already running.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req resumeRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	d := defaultTimeoutV1
	var ok bool
	if d, ok = timeoutOr(req.Timeout, d); !ok {
		writeStatus(w, http.StatusBadRequest, badTimeout)
		return
	}
	if _, err := s.running(r, id); err == nil {
		writeStatus(w, http.StatusConflict, "sandbox "+id+" is already running")
		return
	}
	sb, err := s.opts.Checkpoints.Resume(r.Context(), id, d)
	if err != nil {
		writeError(w, r, err)
		return
	}
	t, err := s.opts.Targets.Target(id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(r, sb, t.AccessToken))
}

// fork makes count sandboxes that go on from this one's current state:
// 201 with one {"sandbox"} or {"error"} per fork asked for.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req forkRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	count, d := 1, defaultTimeoutV2
	if req.Count != nil {
		count = *req.Count
	}
	var ok bool
	if d, ok = timeoutOr(req.Timeout, d); !ok {
		writeStatus(w, http.StatusBadRequest, badTimeout)
		return
	}
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	forks, err := s.opts.Checkpoints.Fork(r.Context(), id, sandbox.ForkRequest{Count: count, Timeout: d})
	if err != nil && len(forks) == 0 {
		writeError(w, r, err)
		return
	}
	out := make([]forkResultJSON, 0, count)
	for _, f := range forks {
		sbj := s.sandboxJSON(r, f, f.AccessToken)
		out = append(out, forkResultJSON{Sandbox: &sbj})
	}
	if err != nil {
		code, _ := errdefs.HTTPStatus(err)
		for range count - len(forks) {
			out = append(out, forkResultJSON{Error: &errorJSON{Code: code, Message: errdefs.PublicMessage(err)}})
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req networkConfig
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.running(r, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if msg := unsupportedNetwork(&req); msg != "" {
		writeStatus(w, http.StatusNotImplemented, msg)
		return
	}
	policy, err := toPolicy(req.AllowInternetAccess, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	// The update has no allowPublicTraffic: that one stays as created.
	policy.AllowPublicTraffic = nil
	if sb.Network != nil {
		policy.AllowPublicTraffic = sb.Network.AllowPublicTraffic
	}
	if err := s.opts.Sandboxes.SetNetwork(r.Context(), id, policy); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

const maxNetworkEntries = 256

// toPolicy turns E2B's network fields into the stored policy.
func toPolicy(allowInternet *bool, n *networkConfig) (*sandbox.NetworkPolicy, error) {
	// E2B lets an allowOut entry win over a denyOut entry (its documented
	// pattern is denyOut 0.0.0.0/0 plus an allow-list).
	public := true // E2B's default: ports open unless allowPublicTraffic is false
	p := &sandbox.NetworkPolicy{AllowInternet: allowInternet, AllowFirst: true, AllowPublicTraffic: &public}
	if n == nil {
		return p, nil
	}
	if p.AllowInternet == nil {
		p.AllowInternet = n.AllowInternetAccess
	}
	if len(n.AllowOut) > maxNetworkEntries || len(n.DenyOut) > maxNetworkEntries {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "at most %d allowOut and %d denyOut entries", maxNetworkEntries, maxNetworkEntries)
	}
	for _, list := range [][]string{n.AllowOut, n.DenyOut} {
		for _, e := range list {
			if e == "" || len(e) > 253 {
				return nil, errdefs.New(errdefs.ErrInvalidArgument, "network entries must be 1-253 characters")
			}
		}
	}
	p.AllowOut, p.DenyOut = n.AllowOut, n.DenyOut
	if n.AllowPublicTraffic != nil {
		p.AllowPublicTraffic = n.AllowPublicTraffic
	}
	if len(n.Rules) > 0 {
		var rules map[string][]struct {
			Transform struct {
				Headers map[string]string `json:"headers"`
			} `json:"transform"`
		}
		if err := json.Unmarshal(n.Rules, &rules); err != nil {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "network.rules must map domains to [{\"transform\":{\"headers\":{...}}}]")
		}
		for domain, list := range rules {
			for _, r := range list {
				for k, v := range r.Transform.Headers {
					if p.Headers == nil {
						p.Headers = map[string]map[string]string{}
					}
					if p.Headers[domain] == nil {
						p.Headers[domain] = map[string]string{}
					}
					p.Headers[domain][k] = v
				}
			}
		}
	}
	// The rules are reported back as sent (unsupportedNetwork refused the
	// other fields networkExtra reads from older records).
	if b, err := json.Marshal(networkExtra{Rules: n.Rules}); err == nil && string(b) != "{}" {
		p.Extra = b
	}
	return p, nil
}

// fromPolicy reports the stored policy in E2B's shape.
func fromPolicy(p *sandbox.NetworkPolicy) *networkConfig {
	if p == nil {
		return nil
	}
	n := &networkConfig{AllowPublicTraffic: p.AllowPublicTraffic, AllowOut: p.AllowOut, DenyOut: p.DenyOut}
	if len(p.Extra) > 0 {
		var extra networkExtra
		if json.Unmarshal(p.Extra, &extra) == nil {
			n.DNSServers, n.EgressProxy, n.MaskRequestHost = extra.DNSServers, extra.EgressProxy, extra.MaskRequestHost
			n.HTTPSPorts, n.Rules = extra.HTTPSPorts, extra.Rules
		}
	}
	return n
}

func privatePorts(p *sandbox.NetworkPolicy) bool {
	return p != nil && p.AllowPublicTraffic != nil && !*p.AllowPublicTraffic
}

// badTimeout answers a timeout that is not a usable count of seconds.
const badTimeout = "timeout must be a positive number of seconds"

// timeoutOr is the timeout a request asks for in seconds, or def when it
// names none. ok is false for a count that is not positive or that a
// time.Duration cannot hold (it would wrap round to a short or negative
// duration).
func timeoutOr(seconds *int, def time.Duration) (d time.Duration, ok bool) {
	if seconds == nil {
		return def, true
	}
	n := *seconds
	if n <= 0 || int64(n) > math.MaxInt64/int64(time.Second) {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}
