package e2bcompat

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestWireTypesMatchE2BSpec holds this package's wire types to E2B's own
// OpenAPI spec (api/e2b/openapi.yml, the spec internal/e2bcompat/e2bapi is
// generated from): each JSON field a type has is a property of its E2B
// schema, and each property the schema requires is a field. An SDK upgrade
// brings the newer spec; a schema change that breaks a type here fails
// this test. The exceptions are where E2B's SDKs send or read what their
// spec does not say, each with the reason.
func TestWireTypesMatchE2BSpec(t *testing.T) {
	spec, err := openapi3.NewLoader().LoadFromFile("../../api/e2b/openapi.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v      any
		schema string
		// beyond: fields the type has that the schema lacks, and why.
		beyond []string
	}{
		{newSandbox{}, "NewSandbox", nil},
		{sandboxJSON{}, "Sandbox", nil},
		{listedSandboxJSON{}, "ListedSandbox", nil},
		// pauseMode: spaced says whether a paused sandbox kept its memory
		// (the SDKs ignore what they do not know).
		{sandboxDetailJSON{}, "SandboxDetail", []string{"pauseMode"}},
		// The SDKs send these network settings inside network (newer SDKs
		// than the spec); allow_internet_access there is the older SDKs'.
		{networkConfig{}, "SandboxNetworkConfig", []string{"allow_internet_access", "dnsServers", "httpsPorts"}},
		{metricJSON{}, "SandboxMetric", nil},
		// details: which node budget refused a create (errdefs.WithDetails).
		{errorJSON{}, "Error", []string{"details"}},
		{lifecycleJSON{}, "SandboxLifecycle", nil},
		{timeoutRequest{}, "SandboxTimeoutRequest", nil},
		{refreshRequest{}, "SandboxRefreshRequest", nil},
		{connectRequest{}, "ConnectSandbox", nil},
		{resumeRequest{}, "ResumedSandbox", nil},
		// requireHealthyGuest: sent by the pinned SDKs, newer than the
		// newest infra spec stored (see e2bapi's package comment).
		{pauseRequest{}, "SandboxPauseRequest", []string{"requireHealthyGuest"}},
		{forkRequest{}, "SandboxForkRequest", nil},
	} {
		ref := spec.Components.Schemas[tc.schema]
		if ref == nil || ref.Value == nil {
			t.Errorf("E2B's spec has no schema %s", tc.schema)
			continue
		}
		props := properties(ref.Value)
		fields := jsonFields(reflect.TypeOf(tc.v))
		var extra, missing []string
		for f := range fields {
			if !props[f] && !slices.Contains(tc.beyond, f) {
				extra = append(extra, f)
			}
		}
		for _, req := range ref.Value.Required {
			if !fields[req] {
				missing = append(missing, req)
			}
		}
		sort.Strings(extra)
		sort.Strings(missing)
		if len(extra) > 0 {
			t.Errorf("%T has fields %v that E2B's %s lacks", tc.v, extra, tc.schema)
		}
		if len(missing) > 0 {
			t.Errorf("%T lacks fields %v that E2B's %s requires", tc.v, missing, tc.schema)
		}
	}
}

// properties answers the property names of s and of the schemas it is
// made of (allOf).
func properties(s *openapi3.Schema) map[string]bool {
	out := map[string]bool{}
	for name := range s.Properties {
		out[name] = true
	}
	for _, part := range s.AllOf {
		for name := range properties(part.Value) {
			out[name] = true
		}
	}
	return out
}

// jsonFields answers the JSON names of t's fields (embedded structs'
// fields included).
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}
