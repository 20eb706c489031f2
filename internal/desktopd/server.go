// Package desktopd is space-desktop, the native computer-use API's server
// inside a desktop sandbox (cmd/space-desktop, started by the desktop
// template's start command): it speaks X11 to the sandbox's display
// itself (github.com/jezek/xgb: XTEST for input, GetImage for the
// screen), so an action is a few X requests and not a process per click.
// It listens on computeruse.Port, which spaced reaches over the sandbox's
// veth (internal/desktop) with the token accesstoken.Desktop derives; it
// reads the sandbox's access token from the agent's root-only state file,
// as space-interpreter does.
package desktopd

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jezek/xgb"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/computeruse"
)

// Config configures the server.
type Config struct {
	Addr string // listen address
	// Socket is the X server's Unix socket (@ for an abstract one).
	Socket string
	// StatePath is the agent's state file; empty turns auth off (tests).
	StatePath string
	// VNCAddr and VNCCommand: the VNC server GET /vnc relays to, started
	// on the first viewer (DefaultVNCAddr, DefaultVNCCommand if empty).
	VNCAddr    string
	VNCCommand []string
	Logger     *slog.Logger
}

// DefaultSocket is display :0's abstract socket, the only one the
// template's Xvfb opens (-nolisten unix).
const DefaultSocket = "@/tmp/.X11-unix/X0"

var errNoDisplay = errors.New("no X display")

// maxActionBytes bounds an action's body: a type action's text and room.
const maxActionBytes = 256 << 10

// Server serves the API.
type Server struct {
	cfg  Config
	d    *display
	vncd *vncServer
	enc  pngEncoder
	// lastPNG is shoot's result, under d.mu.
	lastPNG []byte
}

// xgb logs to stderr by itself (a missing ~/.Xauthority, which the
// template's display does not use); errors reach the caller anyway. It is
// set once here: xgb's connections read it from their own goroutines.
func init() { xgb.Logger = log.New(io.Discard, "", 0) }

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.VNCAddr == "" {
		cfg.VNCAddr = DefaultVNCAddr
	}
	if len(cfg.VNCCommand) == 0 {
		cfg.VNCCommand = DefaultVNCCommand
	}
	return &Server{
		cfg:  cfg,
		d:    &display{socket: cfg.Socket},
		vncd: &vncServer{argv: cfg.VNCCommand, addr: cfg.VNCAddr},
	}
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	s := New(cfg)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	cfg.Logger.Info("space-desktop listening", "addr", ln.Addr().String(), "socket", cfg.Socket)
	go s.warmUp(ctx)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// warmUp connects to the display as soon as it answers and takes one
// screenshot, so that a template checkpointed once its desktop is ready
// holds the X connection and the screenshot's buffers: every sandbox of it
// starts with them, and its first screenshot does not make them.
func (s *Server) warmUp(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		s.d.mu.Lock()
		_, _, err := s.shoot(0, image.Rectangle{})
		s.d.mu.Unlock()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Handler is the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /screenshot", s.auth(s.screenshot))
	mux.HandleFunc("POST /actions", s.auth(s.actions))
	mux.HandleFunc("GET /vnc", s.auth(s.vnc))
	return mux
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.StatePath != "" {
			token, err := readToken(s.cfg.StatePath)
			if err != nil {
				// Fail closed: without the state there is no token to check.
				s.cfg.Logger.Error("cannot read the access token", "err", err)
				http.Error(w, "the sandbox's access token is not available", http.StatusServiceUnavailable)
				return
			}
			got := []byte(r.Header.Get("X-Access-Token"))
			if token == "" || (subtle.ConstantTimeCompare(got, []byte(accesstoken.Desktop(token))) != 1 &&
				subtle.ConstantTimeCompare(got, []byte(token)) != 1) {
				http.Error(w, "missing or wrong X-Access-Token", http.StatusUnauthorized)
				return
			}
		}
		h(w, r)
	}
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var st struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return st.Token, nil
}

func (s *Server) screenshot(w http.ResponseWriter, r *http.Request) {
	width := 0
	if v := r.URL.Query().Get("width"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			http.Error(w, "width must be a positive whole number of pixels", http.StatusBadRequest)
			return
		}
		width = n
	}
	s.d.mu.Lock()
	png, size, err := s.shoot(width, image.Rectangle{})
	s.d.mu.Unlock()
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("X-Screen-Size", fmt.Sprintf("%dx%d", size.Width, size.Height))
	w.Write(png)
}

// shoot takes a screenshot of region (empty: the whole screen) scaled
// down to width (0 or wider than it: as it is), with d.mu held.
func (s *Server) shoot(width int, region image.Rectangle) ([]byte, computeruse.Size, error) {
	var size computeruse.Size
	err := s.withDisplay(func() error {
		var err error
		if size, err = s.d.size(); err != nil {
			return err
		}
		img, err := s.d.capture(size)
		if err != nil {
			return err
		}
		if !region.Empty() {
			img = img.SubImage(region).(*image.RGBA)
		}
		var buf bytes.Buffer
		if err := s.enc.encode(&buf, scaleDown(img, width)); err != nil {
			return err
		}
		size.Width, size.Height = img.Rect.Dx(), img.Rect.Dy()
		s.lastPNG = buf.Bytes()
		return nil
	})
	return s.lastPNG, size, err
}

func (s *Server) actions(w http.ResponseWriter, r *http.Request) {
	var a computeruse.Action
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		http.Error(w, "action: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var res computeruse.Result
	err := s.withDisplay(func() error {
		size, err := s.d.size()
		if err != nil {
			return err
		}
		if err := a.Validate(size); err != nil {
			return &badAction{err}
		}
		if a.Screenshot {
			s.d.armDamage()
		}
		cursor, err := s.d.perform(r.Context(), &a)
		if err != nil {
			return err
		}
		res.Screen = size
		if cursor != nil {
			res.Cursor = *cursor
			return nil
		}
		// QueryPointer's answer comes after the server handled every
		// request before it: the action is done.
		res.Cursor, err = s.d.cursor()
		return err
	})
	if err == nil && (a.Screenshot || a.Action == "screenshot" || a.Action == "zoom") {
		var region image.Rectangle
		switch a.Action {
		case "screenshot":
		case "zoom":
			region = image.Rect(a.Region[0], a.Region[1], a.Region[2], a.Region[3])
		default:
			err = s.d.settle(r.Context())
		}
		if err == nil {
			res.Screenshot, _, err = s.shoot(0, region)
		}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// badAction is an action the screen refuses (off the screen, unknown key).
type badAction struct{ error }

// withDisplay runs f on a connected display, connecting again once if the
// connection broke (the display was replaced).
func (s *Server) withDisplay(f func() error) error {
	for try := 0; ; try++ {
		if err := s.d.connect(); err != nil {
			return err
		}
		err := f()
		var bad *badAction
		if err == nil || errors.As(err, &bad) || try > 0 {
			return err
		}
		// A request on a dead connection: X errors on a live one are
		// answered too, so only retry when the connection went away. The
		// check is a round trip: the screen's size is read again.
		s.d.screen.Store(nil)
		if _, serr := s.d.size(); serr == nil {
			return err
		}
		s.d.drop()
	}
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var bad *badAction
	switch {
	case errors.As(err, &bad):
		http.Error(w, bad.Error(), http.StatusBadRequest)
	case errors.Is(err, errNoDisplay):
		http.Error(w, "the desktop's display is not running", http.StatusConflict)
	default:
		s.cfg.Logger.Error("desktop action failed", "err", err)
		http.Error(w, "desktop: "+err.Error(), http.StatusInternalServerError)
	}
}
