package fault

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/test/harness"
)

// records reads every sandbox record from the store of a stopped daemon:
// the ids of everything it had begun, half-made creates included.
func records(t *testing.T, d *harness.Daemon) []*store.Sandbox {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(d.DataDir, "state.db"))
	if err != nil {
		t.Fatalf("open the store of the stopped daemon: %v", err)
	}
	defer st.Close()
	recs, err := st.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// run runs cmd in the sandbox and returns its stdout, failing the test
// unless it exits 0.
func run(t *testing.T, d *harness.Daemon, id, cmd string) string {
	t.Helper()
	out, err := tryRun(harness.Ctx(t, time.Minute), d, id, cmd)
	if err != nil {
		t.Fatalf("%q in %s: %v", cmd, id, err)
	}
	return out
}

// tryRun runs cmd in the sandbox and returns its stdout; a non-zero exit
// is an error too.
func tryRun(ctx context.Context, d *harness.Daemon, id, cmd string) (string, error) {
	r, err := d.Exec(ctx, id, client.CommandRequest{Cmd: cmd})
	if err != nil {
		return r.Stdout, err
	}
	if r.Exit.Code() != 0 {
		return r.Stdout, fmt.Errorf("exit %d", r.Exit.Code())
	}
	return r.Stdout, nil
}

// wantAPIError checks that err is an API error with one of the statuses
// and a message: what a client of a broken sandbox must get.
func wantAPIError(t *testing.T, what string, err error, statuses ...int) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) {
		t.Errorf("%s: %v, want an API error", what, err)
		return
	}
	for _, s := range statuses {
		if apiErr.Status == s && apiErr.Message != "" && !strings.HasPrefix(apiErr.Code, "http_") {
			return
		}
	}
	t.Errorf("%s: %d %s %q, want one of %v with a JSON error body", what, apiErr.Status, apiErr.Code, apiErr.Message, statuses)
}
