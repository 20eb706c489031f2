package client

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/spacesandbox/space/api/native"
)

// TestTypesMatchSpec holds the client's wire types to api/openapi.yaml
// (the copy generated into api/native, which the server validates
// requests against): each JSON field a type has is a property of its
// schema, and each property the schema requires is a field. A request
// type with a field the spec lacks would be refused by the server's
// validator; a response field the spec lacks is one the client reads that
// no contract promises. The client keeps its own types (value fields,
// its names) rather than the generated ones (pointers for every optional
// field), which the e2e tests and the CLI use.
func TestTypesMatchSpec(t *testing.T) {
	spec, err := native.GetSwagger()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v      any
		schema string
	}{
		{APIKey{}, "APIKey"}, {AuditEntry{}, "AuditEntry"}, {Build{}, "Build"}, {BuildRequest{}, "BuildRequest"},
		{CodeContext{}, "CodeContext"}, {CodeRequest{}, "CodeRequest"},
		{Command{}, "Command"}, {CommandRequest{}, "CommandRequest"}, {CreateSandboxRequest{}, "CreateSandboxRequest"},
		{DesktopAction{}, "DesktopAction"}, {DesktopActionResult{}, "DesktopActionResult"},
		{DrainReport{}, "DrainReport"}, {Entry{}, "Entry"}, {Execution{}, "Execution"}, {LogLine{}, "LogLine"},
		{MetricSample{}, "MetricSample"}, {Network{}, "Network"}, {Node{}, "Node"}, {Pool{}, "Pool"}, {Quotas{}, "Quotas"},
		{Sandbox{}, "Sandbox"}, {Snapshot{}, "Snapshot"}, {Template{}, "Template"}, {Tenant{}, "Tenant"}, {Usage{}, "Usage"},
		{Volume{}, "Volume"}, {VolumeBackup{}, "VolumeBackup"}, {VolumeEntry{}, "VolumeEntry"}, {VolumeMount{}, "VolumeMount"},
	} {
		ref := spec.Components.Schemas[tc.schema]
		if ref == nil || ref.Value == nil {
			t.Errorf("no schema %s in the spec", tc.schema)
			continue
		}
		fields := jsonFields(reflect.TypeOf(tc.v))
		var extra, missing []string
		for f := range fields {
			if _, ok := ref.Value.Properties[f]; !ok {
				extra = append(extra, f)
			}
		}
		for _, req := range ref.Value.Required {
			if !fields[req] {
				missing = append(missing, req)
			}
		}
		sort.Strings(extra)
		if len(extra) > 0 {
			t.Errorf("client.%T has fields %v that schema %s lacks", tc.v, extra, tc.schema)
		}
		if len(missing) > 0 {
			t.Errorf("client.%T lacks fields %v that schema %s requires", tc.v, missing, tc.schema)
		}
	}
}

// jsonFields answers the JSON names of t's fields (embedded structs'
// fields included).
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}
