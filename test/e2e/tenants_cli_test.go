package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// spaceCLI runs the space binary against d with key, and returns its
// stdout, stderr and exit code.
func spaceCLI(t *testing.T, d *harness.Daemon, key string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(harness.Ctx(t, time.Minute), harness.Bin(t, "space"), args...)
	cmd.Env = append(os.Environ(), "SPACE_ADDR="+d.Addr, "SPACE_API_KEY="+key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("space %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// mustCLI is spaceCLI that fails t unless the command exits 0.
func mustCLI(t *testing.T, d *harness.Daemon, key string, args ...string) string {
	t.Helper()
	out, errOut, code := spaceCLI(t, d, key, args...)
	if code != 0 {
		t.Fatalf("space %s: exit %d: %s%s", strings.Join(args, " "), code, errOut, out)
	}
	return out
}

// testTenantCLI drives `space admin` as a binary: an admin makes a tenant
// with a quota, issues it a key that works, lists keys by prefix only,
// reads the tenant's calls in the audit log, and revokes the key, which
// stops working at once. A tenant's key cannot run the admin commands, and
// bad input exits non-zero saying what was wrong.
func testTenantCLI(t *testing.T, d *harness.Daemon) {
	id := "cli-" + harness.RandHex(4)
	from := time.Now().Add(-time.Second)
	if out := mustCLI(t, d, d.APIKey, "admin", "tenant", "create", id, "--name", "CLI tenant", "--max-sandboxes", "3"); strings.TrimSpace(out) != id {
		t.Errorf("tenant create printed %q, want the id %s", out, id)
	}

	var tenants []client.Tenant
	if err := json.Unmarshal([]byte(mustCLI(t, d, d.APIKey, "admin", "tenant", "ls", "--json")), &tenants); err != nil {
		t.Fatalf("tenant ls --json: %v", err)
	}
	var found *client.Tenant
	for i := range tenants {
		if tenants[i].ID == id {
			found = &tenants[i]
		}
	}
	if found == nil || found.Name != "CLI tenant" || found.Quotas.Sandboxes != 3 || found.EffectiveQuotas.Sandboxes != 3 || found.Usage == nil {
		t.Errorf("tenant ls --json: %s is %+v, want name %q, sandboxes quota 3 and its usage", id, found, "CLI tenant")
	}
	if table := mustCLI(t, d, d.APIKey, "admin", "tenant", "ls"); !strings.Contains(table, id) || !strings.Contains(table, "0/3") {
		t.Errorf("tenant ls: %q, want a row of %s with 0/3 sandboxes", table, id)
	}

	key := strings.TrimSpace(mustCLI(t, d, d.APIKey, "admin", "key", "create", id, "--name", "ci"))
	if !strings.HasPrefix(key, "e2b_") || len(key) != len("e2b_")+40 {
		t.Fatalf("key create printed %q, want one e2b_ key", key)
	}
	// The key works, as its tenant, and makes a call the audit log keeps.
	tc := client.New(d.Addr, key)
	ctx := harness.Ctx(t, time.Minute)
	if u, err := tc.Usage(ctx); err != nil || u.ID != id {
		t.Fatalf("the issued key's usage: %+v, %v; want tenant %s", u, err, id)
	}
	if resp, body := do(t, d, "PUT", "/v1/secrets/cli-secret", map[string]string{"value": "v", "host": "cli.example"}, bearer(key)); resp.StatusCode >= 300 {
		t.Fatalf("the issued key's secret: %d %s", resp.StatusCode, body)
	}

	var keys []client.APIKey
	lsJSON := mustCLI(t, d, d.APIKey, "admin", "key", "ls", "--tenant", id, "--json")
	if err := json.Unmarshal([]byte(lsJSON), &keys); err != nil {
		t.Fatalf("key ls --json: %v: %s", err, lsJSON)
	}
	if len(keys) != 1 || keys[0].Tenant != id || keys[0].Name != "ci" || !strings.HasPrefix(key, keys[0].ID) || keys[0].ID == key || !keys[0].RevokedAt.IsZero() {
		t.Fatalf("key ls --tenant %s: %+v, want the one key, by its prefix, not revoked", id, keys)
	}
	prefix := keys[0].ID
	table := mustCLI(t, d, d.APIKey, "admin", "key", "ls", "--tenant", id)
	if !strings.Contains(table, prefix) || strings.Contains(table+lsJSON, key) {
		t.Errorf("key ls: %q, want the prefix %s and never the key", table, prefix)
	}

	// The audit log, as JSON and as a table, has the tenant's call with
	// the key's prefix, and the admin's creation of the tenant.
	var entries []client.AuditEntry
	harness.WaitFor(5*time.Second, func() bool { // an entry is added just after its answer
		entries = nil
		json.Unmarshal([]byte(mustCLI(t, d, d.APIKey, "admin", "audit", "--tenant", id, "--since", "10m", "--json")), &entries)
		return len(entries) > 0
	})
	if len(entries) != 1 || entries[0].Tenant != id || entries[0].Key != prefix || entries[0].Route != "PUT /v1/secrets/{name}" ||
		entries[0].Object != "cli-secret" || entries[0].Status != http.StatusOK || entries[0].Time.Before(from) {
		t.Errorf("audit --tenant %s: %+v, want the one PUT of cli-secret by %s", id, entries, prefix)
	}
	if table := mustCLI(t, d, d.APIKey, "admin", "audit", "--tenant", id); !strings.Contains(table, "PUT /v1/secrets/{name}") || !strings.Contains(table, prefix) {
		t.Errorf("audit --tenant %s: %q, want the PUT by %s", id, table, prefix)
	}
	entries = nil
	json.Unmarshal([]byte(mustCLI(t, d, d.APIKey, "admin", "audit", "--since", "10m", "--json")), &entries)
	sawCreate := false
	for _, e := range entries {
		sawCreate = sawCreate || (e.Key == "admin" && e.Route == "POST /v1/admin/tenants" && e.Created == id && e.Status == http.StatusCreated)
	}
	if !sawCreate {
		t.Errorf("audit: the admin's creation of %s is not in %d entries", id, len(entries))
	}

	// A tenant's key cannot run the admin commands.
	if out, errOut, code := spaceCLI(t, d, key, "admin", "tenant", "ls"); code == 0 || !strings.Contains(errOut, "admin key") {
		t.Errorf("tenant ls with the tenant's key: exit %d, %q %q; want a refusal naming the admin key", code, out, errOut)
	}
	// Bad input: exit non-zero, saying what was wrong, and nothing changes.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "key", "revoke", "e2b_00000000000000ff"}, "not found"},
		{[]string{"admin", "tenant", "create", id}, "exists"},
		{[]string{"admin", "key", "create", "cli-no-such-tenant"}, "not found"},
		{[]string{"admin", "tenant", "create", "cli-bad", "--max-vcpu", "-2"}, "vcpu is -2"},
	} {
		if out, errOut, code := spaceCLI(t, d, d.APIKey, c.args...); code == 0 || !strings.Contains(strings.ToLower(errOut), c.want) {
			t.Errorf("space %s: exit %d, %q %q; want a failure saying %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}

	// Revoking the key stops it at once; the list says when.
	mustCLI(t, d, d.APIKey, "admin", "key", "revoke", prefix)
	if _, err := tc.Usage(ctx); !client.IsUnauthenticated(err) {
		t.Errorf("the revoked key's usage: %v, want 401", err)
	}
	keys = nil
	json.Unmarshal([]byte(mustCLI(t, d, d.APIKey, "admin", "key", "ls", "--tenant", id, "--json")), &keys)
	if len(keys) != 1 || keys[0].RevokedAt.IsZero() {
		t.Errorf("key ls after the revoke: %+v, want the key with its revocation time", keys)
	}
	// The check of the key's 401 can fail: the admin key on the same call
	// answers.
	if _, err := d.Client.Usage(ctx); err != nil {
		t.Errorf("control: the admin key's usage: %v", err)
	}
}
