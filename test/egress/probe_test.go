package egress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// probePy runs one network attempt from inside a sandbox, described by a
// JSON spec, and prints "OK <what came back>" or "ERR <why>". Hosts go
// through getaddrinfo as a client would give them, so odd spellings
// ("0xa9fea9fe") are read by libc exactly as an attacker's program would.
const probePy = `
import base64, json, socket, ssl, struct, sys, time, urllib.request

def connect(host, port, family=0):
    af, st, pr, _, sa = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)[0]
    s = socket.socket(af, st, pr)
    s.settimeout(5)
    s.connect(sa)
    return s

def drain(s):
    data = b""
    try:
        while len(data) < 65536:
            b = s.recv(4096)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError, ssl.SSLError):
        pass
    return data.decode("latin1")

def do_tcp(sp):
    s = connect(sp["host"], sp["port"], socket.AF_INET6 if sp.get("v6") else 0)
    data = sp.get("send", "").encode("latin1")
    if sp.get("split"):
        # one byte at a time, as separate segments
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(min(len(data), 4)):
            s.sendall(data[i:i+1])
            time.sleep(0.2)
        data = data[4:]
    if data:
        s.sendall(data)
    return drain(s)

def do_tls(sp):
    raw = connect(sp["host"], sp["port"])
    if sp.get("ca"):
        ctx = ssl.create_default_context(cafile=sp["ca"])
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    s = ctx.wrap_socket(raw, server_hostname=sp.get("sni"))
    s.sendall(sp["send"].encode("latin1"))
    return drain(s)

def do_dns(sp):
    return " ".join(sorted(set(i[4][0] for i in socket.getaddrinfo(sp["host"], 80, 0, socket.SOCK_STREAM))))

def do_udp(sp):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    if sp.get("broadcast"):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    s.sendto(sp.get("send", "ping").encode("latin1"), (sp["host"], sp["port"]))
    return s.recv(2048).decode("latin1")

def do_icmp(sp):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sp.get("dgram") else socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(3)
    body = struct.pack("!BBHHH", 8, 0, 0, 0x1234, 1) + b"space"
    csum = sum(struct.unpack("!%dH" % (len(body) // 2), body[:len(body) // 2 * 2]))
    csum += body[-1] << 8 if len(body) % 2 else 0
    csum = (csum >> 16) + (csum & 0xffff); csum = ~(csum + (csum >> 16)) & 0xffff
    body = body[:2] + struct.pack("!H", csum) + body[4:]
    s.sendto(body, (sp["host"], 0))
    return "reply %r" % s.recv(2048)

def do_rawtcp(sp):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    s.settimeout(3)
    s.sendto(b"\x00" * 20, (sp["host"], 0))
    return "sent; reply %r" % s.recv(2048)

def do_url(sp):
    ctx = ssl.create_default_context(cafile=sp.get("ca")) if sp.get("ca") else None
    with urllib.request.urlopen(sp["url"], timeout=8, context=ctx) as r:
        return r.read().decode("latin1")

sp = json.loads(base64.b64decode(sys.argv[1]))
try:
    print("OK " + globals()["do_" + sp["kind"]](sp))
except Exception as e:
    print("ERR %s: %s" % (type(e).__name__, e))
`

// spec is one probe: kind is tcp, tls, dns, udp, icmp, rawtcp or url.
type spec struct {
	Kind      string `json:"kind"`
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	Send      string `json:"send,omitempty"`
	SNI       string `json:"sni,omitempty"`
	CA        string `json:"ca,omitempty"`
	URL       string `json:"url,omitempty"`
	V6        bool   `json:"v6,omitempty"`
	Broadcast bool   `json:"broadcast,omitempty"`
	Dgram     bool   `json:"dgram,omitempty"`
	Split     bool   `json:"split,omitempty"`
	// User runs the probe as that user (root for raw sockets).
	User string `json:"-"`
}

const caPath = "/tmp/test-ca.pem"

// prepare uploads the probe and the test CA into a sandbox.
func prepare(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := env.d.Client.Upload(ctx, id, "/tmp/probe.py", strings.NewReader(probePy)); err != nil {
		t.Fatalf("upload probe: %v", err)
	}
	if _, err := env.d.Client.Upload(ctx, id, caPath, bytes.NewReader(env.net.caPEM)); err != nil {
		t.Fatalf("upload CA: %v", err)
	}
}

// probe runs one spec in sandbox id and returns its one line of output.
func probe(t *testing.T, id string, s spec) string {
	t.Helper()
	b, _ := json.Marshal(s)
	out := run(t, id, s.User, []string{"python3", "/tmp/probe.py", base64.StdEncoding.EncodeToString(b)})
	return strings.TrimSpace(out)
}

// run runs argv in sandbox id and returns its stdout.
func run(t *testing.T, id, user string, argv []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := env.d.Client.RunCommand(ctx, id, client.CommandRequest{Argv: argv, User: user, TimeoutSeconds: 60})
	if err != nil {
		t.Fatalf("run %q: %v", argv, err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("run %q: %v (stdout %q)", argv, err, out.String())
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventStderr:
			errb.Write(ev.Data)
		case client.EventEnd:
			if ev.Exit.Code() != 0 {
				t.Fatalf("run %q: exit %+v\nstdout %s\nstderr %s", argv, *ev.Exit, out.String(), errb.String())
			}
			return out.String()
		}
	}
}

// newSandbox creates a sandbox with network n, uploads the probe, and
// kills the sandbox when the test ends.
func newSandbox(t *testing.T, n *client.Network) *client.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sb, err := env.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Network: n})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		env.d.Client.KillSandbox(ctx, sb.ID)
	})
	prepare(t, sb.ID)
	return sb
}

func httpGet(host, path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"
}
