package e2bcompat

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/spacesandbox/space/internal/e2bcompat/e2bapi"
	"github.com/spacesandbox/space/internal/openapicheck"
)

// E2B's own spec (api/e2b/openapi.yml, embedded in e2bapi) validates the
// requests into the control-plane routes it describes, as api/openapi.yaml
// does the native API's: required fields, types, enums and ranges, answered
// 400 in E2B's error shape naming the field. The spec never says
// additionalProperties: false, so the fields newer SDKs add pass (docs/e2b.md).

var loadE2BSpec = sync.OnceValues(func() (*openapi3.T, error) {
	spec, err := e2bapi.GetSwagger()
	if err != nil {
		return nil, fmt.Errorf("load E2B's embedded spec: %w", err)
	}
	return spec, nil
})

var routeParam = regexp.MustCompile(`\{[^}]+\}`)

// specPath answers the path of E2B's spec that a route pattern's path
// serves (the same path, its parameters named as spaced names them), ""
// for none: spaced's own routes (volume content) and /templates/{a}/{b},
// which serves two of the spec's paths, are not validated.
func specPath(spec *openapi3.T, method, path string) string {
	shape := routeParam.ReplaceAllString(path, "{}")
	found := ""
	for p := range spec.Paths.Map() {
		if routeParam.ReplaceAllString(p, "{}") == shape && openapicheck.Operation(spec, method, p) != nil {
			if found != "" {
				return ""
			}
			found = p
		}
	}
	return found
}

// validated wraps a route's handler with the check of E2B's spec, if the
// spec describes the route.
func validated(spec *openapi3.T, pattern string, h http.Handler) http.Handler {
	method, path, _ := strings.Cut(pattern, " ")
	p := specPath(spec, method, path)
	if p == "" {
		return h
	}
	return openapicheck.Validate(openapicheck.Route{
		Spec: spec, Method: method, Path: p, Params: openapicheck.PathParams(path),
		MaxBody: maxJSONBody, Fail: writeError,
	}, h)
}
