package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
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
	return ConnInfo{
		Transport: "ipc", IP: prefix,
		ShellPort: 1, IOPubPort: 2, StdinPort: 3, ControlPort: 4, HBPort: 5,
		Key: newKey(), SignatureScheme: "hmac-sha256",
	}
}

// NewTCP returns the connection of a kernel that can only listen on TCP
// (Deno's), on loopback ports that were free a moment ago: each is bound
// and released here, the way jupyter_client picks them, so another
// process may take one first (the kernel then fails to start). Any
// process of the machine can connect to them; without the key (in the
// 0600 connection file) it cannot make the kernel do anything, but it can
// subscribe to IOPub and read the cells' output.
func NewTCP(ip string) (ConnInfo, error) {
	ports := make([]int, 5)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return ConnInfo{}, fmt.Errorf("find a free port: %w", err)
		}
		held = append(held, l) // held until all are picked: five different ports
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ConnInfo{
		Transport: "tcp", IP: ip,
		ShellPort: ports[0], IOPubPort: ports[1], StdinPort: ports[2], ControlPort: ports[3], HBPort: ports[4],
		Key: newKey(), SignatureScheme: "hmac-sha256",
	}, nil
}

func newKey() string {
	var key [32]byte
	_, _ = rand.Read(key[:])
	return hex.EncodeToString(key[:])
}

// Endpoint is the ZeroMQ address of one of the kernel's ports.
func (c ConnInfo) Endpoint(port int) string {
	if c.Transport == "ipc" {
		return fmt.Sprintf("ipc://%s-%d", c.IP, port)
	}
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}

// Listening reports whether the kernel listens on every port we dial
// (ZeroMQ's dial fails before it does): its unix sockets exist (ipc), or
// a TCP connection to each is accepted (and closed at once; ZeroMQ peers
// drop a connection that never greets).
func (c ConnInfo) Listening() (bool, error) {
	for _, p := range []int{c.ShellPort, c.IOPubPort, c.ControlPort} {
		switch c.Transport {
		case "ipc":
			if _, err := os.Stat(fmt.Sprintf("%s-%d", c.IP, p)); err != nil {
				return false, nil
			}
		case "tcp":
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.IP, strconv.Itoa(p)), time.Second)
			if err != nil {
				return false, nil
			}
			_ = conn.Close()
		default:
			return false, fmt.Errorf("transport %q", c.Transport)
		}
	}
	return true, nil
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
