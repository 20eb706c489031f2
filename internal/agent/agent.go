// Package agent is space-agent, the program inside each sandbox: it serves
// envd's process and filesystem services, the native spaceagent.v1.Agent
// service and envd's plain HTTP endpoints on one HTTP/1.1 port.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/agent/v1/agentv1connect"
	"github.com/spacesandbox/space/api/envd/filesystem/filesystemconnect"
	"github.com/spacesandbox/space/api/envd/process/processconnect"
	"github.com/spacesandbox/space/internal/agent/files"
	"github.com/spacesandbox/space/internal/agent/process"
	"github.com/spacesandbox/space/internal/agent/spawner"
)

// Version is the agent's version, set at build time with -ldflags -X.
var Version = "dev"

// TokenEnv is the environment variable that carries the boot token.
const TokenEnv = "SPACE_AGENT_TOKEN"

// Config is the agent's configuration. Zero values take the defaults.
type Config struct {
	// Addr is the TCP listen address (0.0.0.0:49983).
	Addr string
	// StatePath is where Init's state is persisted ("" disables it).
	StatePath string
	// BootToken authenticates requests until Init replaces it.
	BootToken string
	// ReapOrphans makes the agent reap orphaned zombies (it is PID 1).
	ReapOrphans bool
	// DefaultUser runs processes when neither request nor Init names one.
	DefaultUser string
	// ProcessBufferBytes bounds each process's buffered output (4 MiB).
	ProcessBufferBytes int
	Logger             *slog.Logger
}

// Defaults used by cmd/space-agent's flags.
const (
	DefaultAddr      = "0.0.0.0:49983"
	DefaultStatePath = "/run/space-agent/state.json"
	DefaultUser      = "user"
)

// Server is a configured agent, ready to serve.
type Server struct {
	cfg     Config
	log     *slog.Logger
	state   *stateStore
	procs   *process.Service
	fs      *files.Service
	spawner *spawner.Spawner
	journal *journal
	handler http.Handler
	// warm starts the process warm-up once, after the first Init: not
	// while the sandbox boots, when it would only slow the boot down.
	warm sync.Once
}

// New builds the agent from cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = DefaultUser
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// What the agent logs at info and above is the sandbox's log too
	// (GET /logs), as envd's log lines are E2B's sandbox logs.
	jr := newJournal()
	log = slog.New(jr.handler(log.Handler()))
	st, resumed, err := loadState(cfg.StatePath, State{Token: cfg.BootToken, DefaultUser: cfg.DefaultUser})
	if err != nil {
		return nil, err
	}
	if resumed {
		log.Info("resumed persisted state", "path", cfg.StatePath)
	}
	if st.token() == "" {
		log.Warn("no access token: every request but /health will be refused", "env", TokenEnv)
	}
	s := &Server{cfg: cfg, log: log, state: st, journal: jr}
	s.spawner = spawner.New(spawner.Embedded(), log)
	s.procs = process.NewService(process.NewManager(process.Options{BufferBytes: cfg.ProcessBufferBytes, Logger: log, Spawner: s.spawner}), st.defaults)
	s.fs = files.NewService(st.defaults, log)

	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithCompressMinBytes(1024), connect.WithRecover(s.recovered)}
	mux.Handle(processconnect.NewProcessHandler(s.procs, opts...))
	mux.Handle(filesystemconnect.NewFilesystemHandler(s.fs, opts...))
	mux.Handle(agentv1connect.NewAgentHandler(&agentService{s: s}, opts...))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", s.fs.Download)
	mux.HandleFunc("POST /files", s.fs.Upload)
	mux.HandleFunc("POST /files/compose", s.fs.Compose)
	mux.HandleFunc("POST /files/extract", s.fs.Extract)
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("GET /envs", s.envs)
	mux.HandleFunc("GET /logs", jr.serve)
	s.handler = requireToken(st, mux)
	return s, nil
}

// recovered answers a Connect call whose handler panicked with an internal
// error naming the panic, in place of net/http's recovery (which cuts the
// connection, so spaced saw only "unexpected EOF"), and logs its stack.
func (s *Server) recovered(_ context.Context, spec connect.Spec, _ http.Header, p any) error {
	s.log.Error("handler panicked", "procedure", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, fmt.Errorf("the agent failed in %s: %v", spec.Procedure, p))
}

// Handler is the agent's whole HTTP surface.
func (s *Server) Handler() http.Handler { return s.handler }

// Close releases watchers and the spawn helper.
func (s *Server) Close() {
	s.fs.Close()
	s.spawner.Close()
}

// Run serves the agent until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// spaced keeps one connection per sandbox for as long (a pool
		// sandbox can wait long for its first command).
		IdleTimeout: time.Hour,
		// No write timeout: process and watch streams last as long as they must.
	}
	if cfg.ReapOrphans {
		go s.procs.Manager().ReapOrphans(ctx)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("space-agent listening", "addr", ln.Addr().String(), "version", Version)
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
