package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ConnInfo is a kernel connection file. With the ipc transport the ports
// are suffixes: the kernel binds unix sockets named "<IP>-<port>".
type ConnInfo struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name,omitempty"`
}

// NewIPC returns the connection of a kernel whose sockets live next to
// prefix (a path in a directory only the kernel's user can enter). Unix
// sockets need no free ports, so there is no race for one and nothing of
// the kernel listens on the network.
func NewIPC(prefix string) ConnInfo {
	var key [32]byte
	_, _ = rand.Read(key[:])
	return ConnInfo{
		Transport: "ipc", IP: prefix,
		ShellPort: 1, IOPubPort: 2, StdinPort: 3, ControlPort: 4, HBPort: 5,
		Key: hex.EncodeToString(key[:]), SignatureScheme: "hmac-sha256",
	}
}

// Endpoint is the ZeroMQ address of one of the kernel's ports.
func (c ConnInfo) Endpoint(port int) string {
	if c.Transport == "ipc" {
		return fmt.Sprintf("ipc://%s-%d", c.IP, port)
	}
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}

// SocketPaths are the unix sockets the kernel creates (ipc only): they
// exist once it listens.
func (c ConnInfo) SocketPaths() []string {
	if c.Transport != "ipc" {
		return nil
	}
	var out []string
	for _, p := range []int{c.ShellPort, c.IOPubPort, c.ControlPort} {
		out = append(out, fmt.Sprintf("%s-%d", c.IP, p))
	}
	return out
}

// WriteFile writes the connection file (0600: it holds the key).
func (c ConnInfo) WriteFile(path string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode connection file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create connection dir: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write connection file: %w", err)
	}
	return nil
}
