package interpreter

import (
	"github.com/spacesandbox/space/internal/accesstoken"

	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// maxRequestBody bounds a request body (the code of a cell, mostly).
const maxRequestBody = 16 << 20

// Handler serves E2B's code-interpreter API, and SPACE's resumable
// executions.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("POST /contexts", s.authContexts(s.createContext))
	mux.HandleFunc("GET /contexts", s.authContexts(s.listContexts))
	mux.HandleFunc("POST /contexts/{id}/restart", s.authContexts(s.restartContext))
	mux.HandleFunc("DELETE /contexts/{id}", s.authContexts(s.deleteContext))
	mux.HandleFunc("POST /executions", s.createExecution) // checks the token as /execute does
	mux.HandleFunc("GET /executions", s.authExecutions(s.listExecutions))
	mux.HandleFunc("GET /executions/{id}/events", s.authExecutions(s.executionEvents))
	mux.HandleFunc("POST /executions/{id}/interrupt", s.authExecutions(s.interruptExecution))
	return mux
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.ready:
		if s.readyErr != nil {
			http.Error(w, "the default kernel did not start: "+s.readyErr.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, "OK")
	default:
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}
}

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
	// Timeout (seconds) is ours, not E2B's: the SDKs time out on their
	// side by closing the connection, which interrupts the cell too.
	Timeout *float64 `json:"timeout"`
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	c, ex, ok := s.parseExecution(w, r)
	if !ok {
		return
	}
	start := time.Now()
	s.run(r.Context(), c, c.turns.join(), ex, newLineWriter(w))
	s.log.Debug("execution done", "context", c.ID, "took", time.Since(start))
}

// parseExecution checks the token and reads an execution request (of
// /execute or /executions): the context it runs on, and what to run. On a
// bad request it answers and returns false.
func (s *Server) parseExecution(w http.ResponseWriter, r *http.Request) (*kernelContext, execution, bool) {
	st, version, err := s.checkToken(r, true)
	if err != nil {
		s.refuse(w, err)
		return nil, execution{}, false
	}
	var req executeRequest
	if err := decodeBody(r, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, execution{}, false
	}
	ctxID, lang := deref(req.ContextID), deref(req.Language)
	if ctxID != "" && lang != "" {
		http.Error(w, "Only one of context_id or language can be provided", http.StatusBadRequest)
		return nil, execution{}, false
	}
	var c *kernelContext
	if ctxID != "" {
		if c = s.context(ctxID); c == nil {
			http.Error(w, fmt.Sprintf("Context %s not found!", ctxID), http.StatusNotFound)
			return nil, execution{}, false
		}
	} else {
		lang, kind, err := s.language(lang)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return nil, execution{}, false
		}
		s.mu.Lock()
		c = s.defaults[lang]
		s.mu.Unlock()
		if c == nil {
			// As E2B's server: the language's default context is made by
			// its first execution (python's at start; again if deleted).
			if c, err = s.newContext(r, lang, kind, s.cfg.Cwd, true, false); err != nil {
				s.contextError(w, err)
				return nil, execution{}, false
			}
		}
	}
	ex := execution{code: req.Code, env: req.EnvVars, timeout: s.cfg.DefaultTimeout,
		globalEnv: st.EnvVars, globalVer: version}
	if req.Timeout != nil && *req.Timeout > 0 {
		ex.timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	return c, ex, true
}

type contextRequest struct {
	Language *string `json:"language"`
	Cwd      *string `json:"cwd"`
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request, anonymous bool) {
	var req contextRequest
	if err := decodeBody(r, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	lang, kind, err := s.language(deref(req.Language))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cwd := deref(req.Cwd)
	if cwd == "" {
		cwd = s.cfg.Cwd
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(s.cfg.Cwd, cwd)
	}
	if err := checkDir(cwd); err != nil {
		http.Error(w, "cwd: "+err.Error(), http.StatusBadRequest)
		return
	}
	c, err := s.newContext(r, lang, kind, cwd, false, anonymous)
	if err != nil {
		s.contextError(w, err)
		return
	}
	writeJSON(w, c)
}

// contextError answers a failed newContext.
func (s *Server) contextError(w http.ResponseWriter, err error) {
	var capErr *capacityError
	if errors.As(err, &capErr) {
		s.log.Warn("context refused", "err", err)
		writeError(w, http.StatusTooManyRequests, "resource_exhausted", capErr.msg)
		return
	}
	var cwdErr *cwdError
	if errors.As(err, &cwdErr) {
		http.Error(w, cwdErr.Error(), http.StatusBadRequest)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// newContext starts a context's kernel and adds it (as the language's
// default if asDefault and there is none), if the caps leave room for it.
func (s *Server) newContext(r *http.Request, lang string, kind kernelKind, cwd string, asDefault, anonymous bool) (*kernelContext, error) {
	s.mu.Lock()
	err := s.reserve(anonymous)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c := newKernelContext(jupyter.NewID(), lang, kind, cwd, s.launch)
	c.anonymous = anonymous
	tk, err := c.acquire(r.Context())
	if err == nil {
		_, err = c.kernel(r.Context())
		tk.done()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(anonymous)
	if err != nil {
		s.log.Error("could not start a kernel", "err", err)
		return nil, fmt.Errorf("could not start a %s kernel: %w", lang, err)
	}
	s.contexts[c.ID] = c
	if asDefault {
		if d := s.defaults[lang]; d != nil {
			// Another request made one meanwhile: keep one default.
			delete(s.contexts, c.ID)
			go c.stop(endDelete)
			return d, nil
		}
		s.defaults[lang] = c
	}
	return c, nil
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request, anonymous bool) {
	out := []*kernelContext{}
	for _, c := range s.list() {
		if c.visibleTo(anonymous) {
			out = append(out, c)
		}
	}
	writeJSON(w, out)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request, anonymous bool) {
	c := s.context(r.PathValue("id"))
	if c == nil || !c.visibleTo(anonymous) {
		http.Error(w, fmt.Sprintf("Context %s not found!", r.PathValue("id")), http.StatusNotFound)
		return
	}
	if err := c.restart(r.Context()); err != nil {
		s.log.Error("restart failed", "context", c.ID, "err", err)
		http.Error(w, fmt.Sprintf("Failed to restart context %s: %v", c.ID, err), http.StatusInternalServerError)
		return
	}
	writeJSON(w, nil)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request, anonymous bool) {
	id := r.PathValue("id")
	s.mu.Lock()
	c := s.contexts[id]
	if c != nil && !c.visibleTo(anonymous) {
		c = nil // as unknown: an anonymous caller does not learn it exists
	}
	if c != nil {
		delete(s.contexts, id)
	}
	for lang, d := range s.defaults {
		if d == c {
			delete(s.defaults, lang)
		}
	}
	s.mu.Unlock()
	if c == nil {
		http.Error(w, fmt.Sprintf("Context %s not found!", id), http.StatusNotFound)
		return
	}
	c.stop(endDelete)
	writeJSON(w, nil)
}

func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if len(b) > maxRequestBody {
		return fmt.Errorf("request body over %d bytes", maxRequestBody)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil // restart and delete send none; create may send {}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Token checks (see the package doc for why they differ by route).

var (
	errMissingToken = errors.New("missing X-Access-Token")
	errBadToken     = errors.New("invalid X-Access-Token")
)

// checkToken checks r's X-Access-Token against the sandbox's current
// token; required says whether a request without one is refused. It also
// returns the agent state it read, and its version (0 without a state
// file).
func (s *Server) checkToken(r *http.Request, required bool) (agentState, uint64, error) {
	if s.state == nil {
		return agentState{}, 0, nil
	}
	st, version, err := s.state.get()
	if err != nil {
		return agentState{}, 0, err
	}
	got := r.Header.Get("X-Access-Token")
	switch {
	case got == "" && !required:
	case got == "":
		return agentState{}, 0, errMissingToken
	case st.Token == "" || (subtle.ConstantTimeCompare([]byte(got), []byte(st.Token)) != 1 &&
		subtle.ConstantTimeCompare([]byte(got), []byte(accesstoken.Interpreter(st.Token))) != 1):
		// The access token itself (in-sandbox callers, E2B's debug mode),
		// or the narrower one spaced sends.
		return agentState{}, 0, errBadToken
	}
	return st, version, nil
}

// authContexts checks a /contexts request's token and hands h whether
// the caller is anonymous (access.go).
func (s *Server) authContexts(h func(http.ResponseWriter, *http.Request, bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		anonymous, err := s.contextCaller(r)
		if err != nil {
			s.refuse(w, err)
			return
		}
		h(w, r, anonymous)
	}
}

func (s *Server) refuse(w http.ResponseWriter, err error) {
	if errors.Is(err, errNoState) {
		// Fail closed: without the state file there is no token to check.
		s.log.Error("cannot check access token", "err", err)
		http.Error(w, "the sandbox's access token is not available", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, err.Error(), http.StatusUnauthorized)
}
