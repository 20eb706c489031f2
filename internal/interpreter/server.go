package interpreter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// DefaultAddr is where the E2B SDKs expect the code interpreter.
const DefaultAddr = "0.0.0.0:49999"

// Config is the server's configuration; zero values take the defaults.
type Config struct {
	Addr       string // listen address (DefaultAddr)
	Python     string // python with ipykernel, and bash_kernel for bash ("python3")
	Deno       string // deno, for javascript and typescript ("": they are refused)
	R          string // R with IRkernel, for r ("": it is refused)
	Java       string // a JDK's java, for JJava ("java")
	JJava      string // JJava's kernel jar, for java ("": it is refused)
	RuntimeDir string // kernel sockets and the IPython profile (a temp dir)
	Cwd        string // the default context's directory (the kernel user's home, else the current one)
	// StatePath is the agent's state file, holding the sandbox's access
	// token and env vars; "" turns auth and the sandbox env off.
	StatePath string
	// RequireContextToken makes /contexts* refuse requests without a
	// token too; the published SDKs do not send one there (see doc.go).
	RequireContextToken bool
	// MaxContexts bounds the contexts (each a kernel process), the
	// default ones included; MaxAnonymousContexts those of them made by a
	// request without a token. Past either a new one is a 429. Zero
	// derives them from the sandbox's memory (ContextLimits).
	MaxContexts          int
	MaxAnonymousContexts int
	KernelUser           string // run kernels as this user ("": the server's)
	// PlainKernels keeps the per-cell costs of ipykernel the server drops
	// otherwise (kernel.go, quick flushes): for a benchmark's anchor.
	PlainKernels bool
	// KernelAddressSpace is each kernel's RLIMIT_AS: -1 derives it from
	// the sandbox's memory (KernelAddressSpace), 0 sets none.
	KernelAddressSpace int64
	// MemoryReserve is the free memory of the sandbox under which the
	// biggest kernel running a cell is killed (memguard.go): -1 derives
	// it from the sandbox's memory (MemoryReserve), 0 turns the guard off.
	MemoryReserve      int64
	MaxOutputBytes     int64         // per execution (32 MiB); -1: no limit
	DefaultTimeout     time.Duration // per execution unless the request says; 0: none
	KernelStartTimeout time.Duration // 60 s
	// Resumable executions (/executions): how many are kept (64; running
	// ones are never dropped), the bytes of lines kept per execution
	// besides its first and end lines (4 MiB; the oldest go first), and
	// the bytes of all of them together past which finished ones are
	// dropped, oldest first (64 MiB).
	KeepExecutions     int
	ExecutionLogBytes  int64
	ExecutionLogsBytes int64
	Env                []string // kernels' base environment (the server's)
	Logger             *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Java == "" {
		c.Java = "java"
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = 32 << 20
	}
	if c.KernelStartTimeout == 0 {
		c.KernelStartTimeout = 60 * time.Second
	}
	if c.MaxContexts <= 0 || c.MaxAnonymousContexts <= 0 {
		all, anonymous := ContextLimits(SandboxMemory())
		if c.MaxContexts <= 0 {
			c.MaxContexts = all
		}
		if c.MaxAnonymousContexts <= 0 {
			c.MaxAnonymousContexts = min(anonymous, c.MaxContexts)
		}
	}
	if c.KeepExecutions <= 0 {
		c.KeepExecutions = 64
	}
	if c.ExecutionLogBytes <= 0 {
		c.ExecutionLogBytes = 4 << 20
	}
	if c.ExecutionLogsBytes <= 0 {
		c.ExecutionLogsBytes = 64 << 20
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is the code interpreter: contexts, each with its kernel, behind
// E2B's HTTP API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	launch  *launcher
	kernels *kernelAvailability
	state   *stateFile   // nil: no auth, no sandbox env
	execs   *execTable   // resumable executions
	guard   *memoryGuard // nil: none
	ownDir  bool         // RuntimeDir was made by New and is removed by Close

	mu       sync.Mutex
	contexts map[string]*kernelContext
	defaults map[string]*kernelContext // language -> its default context
	// starting counts the contexts whose kernels are starting, which hold
	// their place under the caps (anonymous: those made without a token).
	starting, startingAnonymous int

	ready    chan struct{} // closed when the default context's first start is over
	readyErr error
}

// New prepares a server: its runtime directory, the kernels' IPython
// profile and the default contexts, Python's and (with Deno) JavaScript's,
// none started yet (see Start).
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, contexts: map[string]*kernelContext{},
		defaults: map[string]*kernelContext{}, ready: make(chan struct{}),
		execs: newExecTable(cfg.KeepExecutions, cfg.ExecutionLogsBytes)}
	if cfg.StatePath != "" {
		s.state = &stateFile{path: cfg.StatePath}
	}
	l := &launcher{python: cfg.Python, deno: cfg.Deno, r: cfg.R, java: cfg.Java, jjava: cfg.JJava, startLimit: cfg.KernelStartTimeout, log: cfg.Logger, quick: !cfg.PlainKernels,
		maxFrame: frameLimit(cfg.MaxOutputBytes), maxOutput: cfg.MaxOutputBytes}
	s.kernels = &kernelAvailability{python: cfg.Python, deno: cfg.Deno,
		rjava: rjavaAvailability{r: cfg.R, java: cfg.Java, jjava: cfg.JJava}}
	home := ""
	if cfg.KernelUser != "" {
		cred, dir, err := lookupUser(cfg.KernelUser)
		if err != nil {
			return nil, err
		}
		l.cred, home = cred, dir
	}
	if cfg.Cwd == "" {
		cfg.Cwd = home
		if cfg.Cwd == "" {
			wd, err := os.Getwd()
			if err != nil {
				return nil, fmt.Errorf("working directory: %w", err)
			}
			cfg.Cwd = wd
		}
		s.cfg.Cwd = cfg.Cwd
	}
	switch {
	case cfg.KernelAddressSpace < 0:
		l.addrSpace = KernelAddressSpace(SandboxMemory())
	default:
		l.addrSpace = uint64(cfg.KernelAddressSpace)
	}
	dir := cfg.RuntimeDir
	if dir == "" {
		d, err := os.MkdirTemp("", "space-interpreter-")
		if err != nil {
			return nil, fmt.Errorf("create runtime dir: %w", err)
		}
		dir, s.ownDir = d, true
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("create runtime dir: %w", err)
	}
	l.runDir = filepath.Join(dir, "kernels")
	l.ipythonDir = filepath.Join(dir, "ipython")
	if err := os.MkdirAll(l.runDir, 0o711); err != nil {
		return nil, fmt.Errorf("create kernels dir: %w", err)
	}
	if err := writeProfile(l.ipythonDir, l.chown); err != nil {
		return nil, err
	}
	l.env = kernelEnv(cfg.Env, l.ipythonDir, home)
	s.launch = l
	reserve := uint64(max(cfg.MemoryReserve, 0))
	if cfg.MemoryReserve < 0 {
		reserve = MemoryReserve(SandboxMemory())
	}
	if reserve > 0 {
		s.guard = newMemoryGuard(reserve, cfg.Logger)
	}
	s.log.Info("code interpreter configured", "python", cfg.Python, "deno", cfg.Deno, "r", cfg.R, "jjava", cfg.JJava, "cwd", cfg.Cwd,
		"kernel_user", cfg.KernelUser, "kernel_address_space", l.addrSpace, "memory_reserve", reserve, "runtime_dir", dir)

	def := newKernelContext(jupyter.NewID(), "python", ipykernel, cfg.Cwd, l)
	s.contexts[def.ID], s.defaults["python"] = def, def
	if cfg.Deno != "" {
		// E2B's server makes the JavaScript default context at start too,
		// and lists it; its kernel (200 MiB idle) starts with its first
		// cell here, not with the server.
		js := newKernelContext(jupyter.NewID(), "javascript", denoKernel, cfg.Cwd, l)
		s.contexts[js.ID], s.defaults["javascript"] = js, js
	}
	return s, nil
}

// Start starts the default context's kernel in the background, so the
// first execution finds it warm; /health answers 200 once it is up.
func (s *Server) Start() {
	if s.guard != nil {
		go s.guard.run()
	}
	def := s.defaults["python"]
	go func() {
		defer close(s.ready)
		tk, err := def.acquire(context.Background())
		if err != nil {
			s.readyErr = err
			return
		}
		defer tk.done()
		start := time.Now()
		if _, err := def.kernel(context.Background()); err != nil {
			s.log.Error("default kernel did not start", "err", err)
			s.readyErr = err
			return
		}
		s.log.Info("default kernel started", "context", def.ID, "took", time.Since(start))
	}()
}

// Ready is closed when the default kernel's first start is over; Err says
// how it went.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Err is the default kernel's start error, once Ready is closed.
func (s *Server) Err() error {
	<-s.ready
	return s.readyErr
}

// Close interrupts the resumable executions, kills every kernel and
// removes the runtime directory if New made it.
func (s *Server) Close() {
	if s.guard != nil {
		s.guard.close()
	}
	s.execs.interruptAll()
	s.mu.Lock()
	all := make([]*kernelContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.stop(endDelete)
	}
	if s.ownDir {
		_ = os.RemoveAll(filepath.Dir(s.launch.runDir))
	}
}

// Run serves on cfg.Addr until ctx ends, then kills the kernels.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.Start()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		// Idle keep-alive connections stay long: the SDKs reuse them
		// between cells that may be minutes apart.
		IdleTimeout: 10 * time.Minute, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("code interpreter listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

func (s *Server) context(id string) *kernelContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

func (s *Server) list() []*kernelContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*kernelContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// kernelEnv is the environment every kernel starts with.
func kernelEnv(base []string, ipythonDir, home string) []string {
	env := make([]string, 0, len(base)+6)
	seen := map[string]bool{}
	for _, kv := range base {
		k, _, _ := cutEnv(kv)
		switch k {
		case "IPYTHONDIR", "JPY_PARENT_PID":
			continue
		case "HOME", "USER", "LOGNAME":
			if home != "" {
				continue // the kernel user's, below
			}
		}
		seen[k] = true
		env = append(env, kv)
	}
	env = append(env, "IPYTHONDIR="+ipythonDir)
	if home != "" {
		env = append(env, "HOME="+home)
	}
	if !seen["LANG"] {
		env = append(env, "LANG=C.UTF-8")
	}
	if !seen["MALLOC_ARENA_MAX"] {
		// glibc reserves 64 MiB of address space per thread arena; a
		// kernel has many threads, and its RLIMIT_AS counts every byte.
		env = append(env, "MALLOC_ARENA_MAX=2")
	}
	if !seen["PATH"] {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return env
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

var errNotDir = errors.New("not a directory")

func checkDir(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %w", path, errNotDir)
	}
	return nil
}
