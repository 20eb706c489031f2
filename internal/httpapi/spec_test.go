package httpapi

import (
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestRoutesMatchSpec fails when the route table and api/openapi.yaml
// disagree: the spec is the contract.
func TestRoutesMatchSpec(t *testing.T) {
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	inSpec := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "delete", "patch":
				inSpec[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	inCode := map[string]bool{}
	for _, r := range (&Server{metrics: http.NotFoundHandler()}).table() {
		inCode[r.method+" "+r.path] = true
	}
	var missing, extra []string
	for k := range inCode {
		if !inSpec[k] {
			missing = append(missing, k)
		}
	}
	for k := range inSpec {
		if !inCode[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes served but not in api/openapi.yaml: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("routes in api/openapi.yaml but not served: %v", extra)
	}
}
