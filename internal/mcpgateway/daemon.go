package mcpgateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Paths is where the gateway keeps its files (the E2B SDKs read
// TokenFile; the rest is the gateway's own).
type Paths struct {
	// TokenFile holds the bearer token (0600, root's), no newline.
	TokenFile string
	// ConfigFile holds the config the gateway was started with (0600).
	ConfigFile string
	// LogFile is the running gateway's log (servers' stderr too).
	LogFile string
}

// DefaultPaths are E2B's (the token file) and ours.
var DefaultPaths = Paths{
	TokenFile:  "/etc/mcp-gateway/.token",
	ConfigFile: "/etc/mcp-gateway/config.json",
	LogFile:    "/var/log/mcp-gateway.log",
}

// DefaultAddr is where E2B's SDKs expect the gateway: port 50005.
const DefaultAddr = ":50005"

// Launch is `mcp-gateway --config <json>`: it checks the config, starts
// the gateway (self with the arguments serveArgs) in its own session with
// the config and the token (token, or a random one when empty) on its
// stdin, and returns once every server is up and the port is served, or
// with the reason it is not. The gateway outlives this command (its output
// goes to the log file, so the command's pipes close when it returns).
func Launch(config []byte, token string, cat Catalog, paths Paths, self string, serveArgs []string) error {
	if _, err := Parse(config, cat); err != nil {
		return err
	}
	if token == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		token = hex.EncodeToString(b)
	}
	in, err := json.Marshal(launchInput{Config: config, Token: token})
	if err != nil {
		return fmt.Errorf("encode the gateway's input: %w", err)
	}
	logf, err := os.OpenFile(paths.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open the gateway's log: %w", err)
	}
	defer logf.Close()
	ready, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer ready.Close()
	cmd := exec.Command(self, serveArgs...)
	cmd.Env = serverEnv(os.Environ())
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{readyW} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		return fmt.Errorf("start the gateway: %w", err)
	}
	readyW.Close()
	// The gateway writes "ok", or why it failed, then closes fd 3 (or it
	// dies, and the pipe closes).
	msg, _ := io.ReadAll(io.LimitReader(ready, 64<<10))
	if string(msg) == "ok" {
		_ = cmd.Process.Release()
		return nil
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(msg) == 0 {
		return fmt.Errorf("the gateway exited before it was ready (its log: %s)", paths.LogFile)
	}
	return errors.New(string(msg))
}

// launchInput is what Launch gives the gateway on its stdin.
type launchInput struct {
	Config json.RawMessage `json:"config"`
	Token  string          `json:"token"`
}

// Serve is the gateway itself (`mcp-gateway serve`): it reads the config
// and token from input, binds addr, launches the servers, stores the token
// and config (only then: a second gateway that cannot start leaves the
// first one's token in place), reports on ready ("ok" or the error) and
// closes it, then serves until ctx ends.
func Serve(ctx context.Context, cat Catalog, paths Paths, addr string, input io.Reader, ready *os.File, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if ready != nil {
		// The MCP servers must not inherit it: Launch waits for it to
		// close.
		syscall.CloseOnExec(int(ready.Fd()))
	}
	report := func(err error) error {
		if ready != nil {
			if err != nil {
				_, _ = io.WriteString(ready, err.Error())
			} else {
				_, _ = io.WriteString(ready, "ok")
			}
			_ = ready.Close()
			ready = nil
		}
		return err
	}
	var in launchInput
	if err := json.NewDecoder(io.LimitReader(input, 16<<20)).Decode(&in); err != nil {
		return report(fmt.Errorf("read the gateway's input: %w", err))
	}
	servers, err := Parse(in.Config, cat)
	if err != nil {
		return report(err)
	}
	token := in.Token
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return report(fmt.Errorf("listen on %s: %w", addr, err))
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	g, err := Start(startCtx, servers, os.Stderr, log)
	cancel()
	if err != nil {
		ln.Close()
		return report(err)
	}
	defer g.Close()
	if err := store(paths, token, in.Config); err != nil {
		ln.Close()
		return report(err)
	}
	hs := &http.Server{Handler: g.Handler(token), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	_ = report(nil)
	log.Info("MCP gateway serving", "addr", ln.Addr().String(), "servers", len(servers))
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// store writes the token (for the SDKs' get_mcp_token) and the config (for
// whoever looks) into root-only files.
func store(paths Paths, token string, config []byte) error {
	for _, f := range []struct {
		path string
		data []byte
	}{{paths.TokenFile, []byte(token)}, {paths.ConfigFile, config}} {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return fmt.Errorf("make %s: %w", filepath.Dir(f.path), err)
		}
		if err := writeFile(f.path, f.data); err != nil {
			return err
		}
	}
	return nil
}

// writeFile replaces path with data, readable by its owner only.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
