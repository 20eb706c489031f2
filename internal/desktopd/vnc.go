package desktopd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/computeruse"
)

// DefaultVNCAddr is where the viewer's x11vnc listens: loopback only, so
// nothing outside the sandbox reaches it but through GET /vnc (which
// needs the sandbox's desktop token). It is not the SDK's 5900, so the
// SDK's stream.start() and the console's viewer do not get in each
// other's way.
const DefaultVNCAddr = "127.0.0.1:5910"

// DefaultVNCCommand serves display :0 on DefaultVNCAddr: shared (several
// viewers, and the SDK's x11vnc beside it), kept running between viewers,
// no password (only space-desktop, past its token check, connects).
var DefaultVNCCommand = []string{"x11vnc", "-display", ":0", "-rfbport", "5910", "-localhost",
	"-shared", "-forever", "-nopw", "-quiet", "-noipv6"}

// vncStartTimeout bounds the wait for a new x11vnc to listen.
const vncStartTimeout = 20 * time.Second

// vncServer starts the VNC server on the first viewer and again when it
// has exited (the display it served was replaced).
type vncServer struct {
	argv []string
	addr string
	mu   sync.Mutex
	done chan struct{} // closed when the current process exits; nil: none
}

// dial connects to the VNC server, starting it first if none runs.
func (v *vncServer) dial(ctx context.Context) (net.Conn, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done != nil {
		select {
		case <-v.done:
			v.done = nil
		default:
		}
	}
	if v.done == nil {
		if c, err := net.Dial("tcp", v.addr); err == nil {
			return c, nil // one already listens (started before a restart of ours)
		}
		done, err := v.start()
		if err != nil {
			return nil, err
		}
		v.done = done
	}
	ctx, cancel := context.WithTimeout(ctx, vncStartTimeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", v.addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-v.done:
			return nil, fmt.Errorf("%w: the VNC server exited", errNoDisplay)
		case <-ctx.Done():
			return nil, fmt.Errorf("the VNC server does not listen on %s: %w", v.addr, err)
		case <-time.After(10 * time.Millisecond): // a refused connect on loopback is cheap
		}
	}
}

// start runs the VNC server as the user who started space-desktop with
// sudo (the desktop's user), not as root.
func (v *vncServer) start() (chan struct{}, error) {
	cmd := exec.Command(v.argv[0], v.argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "DISPLAY=:0")
	uid, uerr := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32)
	gid, gerr := strconv.ParseUint(os.Getenv("SUDO_GID"), 10, 32)
	if uerr == nil && gerr == nil && os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		if home := homeOf(uid); home != "" {
			cmd.Env = append(cmd.Env, "HOME="+home)
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the VNC server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return done, nil
}

// homeOf is uid's home directory from /etc/passwd, or "".
func homeOf(uid uint64) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 6 && f[2] == strconv.FormatUint(uid, 10) {
			return f[5]
		}
	}
	return ""
}

// vnc answers GET /vnc with Upgrade: rfb by relaying the connection to
// the VNC server.
func (s *Server) vnc(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), computeruse.VNCUpgrade) {
		http.Error(w, "GET /vnc needs Upgrade: "+computeruse.VNCUpgrade, http.StatusBadRequest)
		return
	}
	up, err := s.vncd.dial(r.Context())
	if err != nil {
		if errors.Is(err, errNoDisplay) {
			http.Error(w, "the desktop's display is not running", http.StatusConflict)
			return
		}
		s.cfg.Logger.Error("vnc", "err", err)
		http.Error(w, "desktop: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer up.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "the connection cannot be taken over", http.StatusInternalServerError)
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+computeruse.VNCUpgrade+"\r\n\r\n"); err != nil {
		return
	}
	relay(conn, brw.Reader, up)
}

// relay copies both ways until either side ends; in holds what the
// server already read of the client's side.
func relay(client net.Conn, in *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, in)
		if c, ok := up.(interface{ CloseWrite() error }); ok {
			c.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, up)
		done <- struct{}{}
	}()
	<-done
}
