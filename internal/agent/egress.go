package agent

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// resolvConf is where libc and most resolvers look.
const resolvConf = "/etc/resolv.conf"

// writeResolvConf points the sandbox's resolver at the egress gateway's
// DNS. Any address would be steered there; naming the gateway keeps it
// readable.
func writeResolvConf(server string) error {
	ip, err := netip.ParseAddr(server)
	if err != nil {
		return fmt.Errorf("nameserver %q: %w", server, err)
	}
	tmp := resolvConf + ".space"
	if err := os.WriteFile(tmp, []byte("nameserver "+ip.String()+"\noptions timeout:2 attempts:2\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, resolvConf); err != nil {
		return fmt.Errorf("install %s: %w", resolvConf, err)
	}
	return nil
}

// The trust store most TLS stacks read, and the gateway CA's own file
// (for NODE_EXTRA_CA_CERTS).
const (
	trustBundle = "/etc/ssl/certs/ca-certificates.crt"
	gatewayCA   = "/etc/ssl/certs/space-egress-ca.pem"
)

// installCA adds the egress gateway's CA to the sandbox's trust store,
// once: the gateway signs the certificates it shows when it reads HTTPS
// to inject credentials.
func installCA(pemText string) error {
	if !strings.HasPrefix(pemText, "-----BEGIN CERTIFICATE-----") {
		return fmt.Errorf("CA is not a PEM certificate")
	}
	if err := os.MkdirAll(filepath.Dir(gatewayCA), 0o755); err != nil {
		return fmt.Errorf("certs dir: %w", err)
	}
	if err := os.WriteFile(gatewayCA, []byte(pemText), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", gatewayCA, err)
	}
	bundle, err := os.ReadFile(trustBundle)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", trustBundle, err)
	}
	if strings.Contains(string(bundle), strings.TrimSpace(pemText)) {
		return nil
	}
	f, err := os.OpenFile(trustBundle, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", trustBundle, err)
	}
	defer f.Close()
	if len(bundle) > 0 && !strings.HasSuffix(string(bundle), "\n") {
		pemText = "\n" + pemText
	}
	if _, err := f.WriteString(pemText); err != nil {
		return fmt.Errorf("append to %s: %w", trustBundle, err)
	}
	return nil
}
