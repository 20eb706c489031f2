package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/spacesandbox/space/api/native"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/openapicheck"
)

// contract is api/openapi.yaml as the server reads it (the copy embedded
// in the generated package): each route's operation.
type contract struct {
	spec *openapi3.T
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	spec, err := native.GetSwagger()
	if err != nil {
		return nil, fmt.Errorf("load the embedded API spec: %w", err)
	}
	return &contract{spec: spec}, nil
})

// operation answers the spec's operation for a router pattern
// ("GET /v1/sandboxes/{id}"), nil for none.
func (c *contract) operation(pattern string) *openapi3.Operation {
	method, path, _ := strings.Cut(pattern, " ")
	return openapicheck.Operation(c.spec, method, path)
}

// validate checks a request against its operation in the spec before the
// handler reads it (openapicheck.Validate).
func (c *contract) validate(pattern string, _ *openapi3.Operation, next http.Handler) http.Handler {
	method, path, _ := strings.Cut(pattern, " ")
	return openapicheck.Validate(openapicheck.Route{Spec: c.spec, Method: method, Path: path, MaxBody: maxJSONBody, Fail: writeError}, next)
}

// paramError answers a path, query or header parameter the generated
// router could not bind (a pid that is not a number, a limit that is not
// an integer) as invalid_argument naming the parameter and its value.
func paramError(w http.ResponseWriter, r *http.Request, err error) {
	var format *native.InvalidParamFormatError
	var required *native.RequiredParamError
	var many *native.TooManyValuesForParamError
	switch {
	case errors.As(err, &format):
		name := format.ParamName
		value := openapicheck.ParamValue(r, name)
		what := "not valid"
		if c, cerr := loadContract(); cerr == nil {
			what = c.describe(r.Pattern, name)
		}
		err = errdefs.New(errdefs.ErrInvalidArgument, "%s %q is %s", name, value, what)
	case errors.As(err, &required):
		err = errdefs.New(errdefs.ErrInvalidArgument, "%s is required", required.ParamName)
	case errors.As(err, &many):
		err = errdefs.New(errdefs.ErrInvalidArgument, "%s is given %d times; give it once", many.ParamName, many.Count)
	default:
		err = errdefs.New(errdefs.ErrInvalidArgument, "%v", err)
	}
	writeError(w, r, err)
}

// describe says what the spec wants of a parameter of the route pattern
// serves, for an error message.
func (c *contract) describe(pattern, name string) string {
	op := c.operation(pattern)
	if op == nil {
		return "not valid"
	}
	p := op.Parameters.GetByInAndName(openapi3.ParameterInPath, name)
	for _, in := range []string{openapi3.ParameterInQuery, openapi3.ParameterInHeader} {
		if p == nil {
			p = op.Parameters.GetByInAndName(in, name)
		}
	}
	if p == nil || p.Schema == nil || p.Schema.Value == nil {
		return "not valid"
	}
	return openapicheck.DescribeSchema(p.Schema.Value)
}
