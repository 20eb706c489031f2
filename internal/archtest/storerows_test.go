package archtest

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The API layers answer from the domain's types (sandbox.Sandbox,
// sandbox.State, sandbox.NetworkPolicy, sandbox.VolumeMount,
// template.Build), never from the catalog's rows: a change of the stored
// schema ends in the domain packages' storemap.go. They
// still name the store for the tenants' records, which tenant.Service
// hands out as they are.
var apiLayers = []string{"internal/httpapi", "internal/e2bcompat"}

// storeRow matches the store's names of sandbox and build rows, their
// states and what they carry (Sandbox, StateRunning, Build, BuildReady,
// CheckpointRef, NetworkPolicy, VolumeMount, ...).
var storeRow = regexp.MustCompile(`^(State|Build|Sandbox|Checkpoint|NetworkPolicy|VolumeMount)`)

// storeRowUses answers "file:line store.X" for every name of the store
// package that storeRow matches, in the Go files (tests too: their fakes
// stand in for the domain) under dir.
func storeRowUses(t *testing.T, dir string) []string {
	t.Helper()
	return selectorUses(t, dir, module+"/internal/store", true, storeRow.MatchString)
}

// TestAPILayersNameNoStoreRows: httpapi and e2bcompat see sandboxes and
// builds through the sandbox and template packages' own types.
func TestAPILayersNameNoStoreRows(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range apiLayers {
		for _, use := range storeRowUses(t, filepath.Join(root, dir)) {
			t.Errorf("%s: use the sandbox or template package's type (its storemap.go maps the row)", use)
		}
	}
}

// TestStoreRowCheckCanFail: the check finds such names under any import
// name, and lets the store's other names be (the positive control: a
// checker that found nothing anywhere would pass the test above).
func TestStoreRowCheckCanFail(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport st \"" + module + "/internal/store\"\n\n" +
		"var a = st.StateRunning\n\nvar q st.Quotas\n\nfunc f(b *st.Build) *st.CheckpointRef { return nil }\n\n" +
		"var n = &st.NetworkPolicy{}\n\nvar m []st.VolumeMount\n\nvar v st.Volume\n"
	if err := writeFile(filepath.Join(dir, "p_test.go"), src); err != nil {
		t.Fatal(err)
	}
	got := storeRowUses(t, dir)
	want := []string{"st.StateRunning", "st.Build", "st.CheckpointRef", "st.NetworkPolicy", "st.VolumeMount"}
	if len(got) != len(want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], " "+w) {
			t.Errorf("found %v, want %v", got, want)
		}
	}
}
