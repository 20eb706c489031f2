// Package pgtest starts a real PostgreSQL server (Debian's postgresql
// package) for tests: its own data directory, loopback port and password,
// run as the postgres user, removed when the test ends. A machine without
// the package skips (fails under strict mode, see internal/testenv).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/testenv"
)

// Server is a running PostgreSQL server.
type Server struct {
	bin      string // the server's bin directory
	dir      string // data directory and logs
	port     int
	password string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Bin finds the newest installed server's bin directory ("" when none).
func Bin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	if len(dirs) == 0 {
		return ""
	}
	return filepath.Dir(dirs[0])
}

func version(postgresPath string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(postgresPath))))
	return v
}

// Start initialises and starts a server for t.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Bin()
	if bin == "" {
		testenv.Skip(t, "no PostgreSQL server (Debian's postgresql package) under /usr/lib/postgresql")
	}
	s := &Server{bin: bin, password: randHex(12)}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Skipf(t, "no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "space-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() {
		s.Stop(t)
		os.RemoveAll(dir)
	})
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(s.password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		for _, p := range []string{dir, pw} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := s.command("initdb", "-D", filepath.Join(dir, "data"), "-U", "space", "--pwfile", pw,
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.port = freePort(t)
	s.Restart(t)
	return s
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// URL is a connection URL for database db ("postgres" is always there).
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://space:%s@127.0.0.1:%d/%s?sslmode=disable", s.password, s.port, db)
}

// NewDatabase creates an empty database and answers its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := "t_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "create database "+name); err != nil {
		t.Fatal(err)
	}
	return s.URL(name)
}

// Stop shuts the server down (fast shutdown: clients are disconnected)
// and waits for it.
func (s *Server) Stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Restart starts the server (again) on its port and waits until it
// accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(cmd, s.exited)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			t.Fatalf("postgres exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not accepting connections after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
