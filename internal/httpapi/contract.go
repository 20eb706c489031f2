package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/spacesandbox/space/api/native"
	"github.com/spacesandbox/space/internal/errdefs"
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
	item := c.spec.Paths.Value(path)
	if item == nil {
		return nil
	}
	return item.GetOperation(method)
}

// validate checks a request against its operation in the spec before the
// handler reads it (kin-openapi's openapi3filter): path and query
// parameters (types, enums, ranges) and JSON bodies (required fields,
// types, enums, ranges, and no field the schema does not name where it
// says additionalProperties: false). A request that fails answers 400
// invalid_argument naming the parameter or field. Bodies that are not JSON
// (uploads) are streamed to the handler unread; a JSON body that does not
// parse is left to the handler's decoder, which says where it breaks.
// Defaults are not filled in: a field left out stays left out.
func (c *contract) validate(pattern string, op *openapi3.Operation, next http.Handler) http.Handler {
	method, path, _ := strings.Cut(pattern, " ")
	// The chain has authenticated the request already. The validator's
	// own security step would read the whole body into memory to hand it
	// to an authentication function (kin-openapi does), which for an
	// upload streamed to a sandbox is gigabytes: the route it checks has
	// no security requirements.
	unsecured := *op
	unsecured.Security = &openapi3.SecurityRequirements{}
	route := &routers.Route{Spec: c.spec, Server: nil, Path: path, PathItem: c.spec.Paths.Value(path), Method: method, Operation: &unsecured}
	var names []string
	for _, m := range patternParam.FindAllStringSubmatch(path, -1) {
		names = append(names, m[1])
	}
	jsonBody := op.RequestBody != nil && op.RequestBody.Value != nil && op.RequestBody.Value.Content.Get(jsonType) != nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		params := make(map[string]string, len(names))
		for _, n := range names {
			params[n] = r.PathValue(n)
		}
		// What the validator sees: never the body of a stream (an upload
		// goes to its handler unread).
		check := r.Clone(r.Context())
		check.Body = http.NoBody
		body := []byte(nil)
		if jsonBody {
			var err error
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
			if err != nil {
				var tooLarge *http.MaxBytesError
				if errors.As(err, &tooLarge) {
					err = errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
				}
				writeError(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			// The content type is not checked (clients that send none
			// were always served): the body is validated as the JSON the
			// handler decodes it as.
			check.Header.Set("Content-Type", jsonType)
			check.Body = io.NopCloser(bytes.NewReader(body))
		}
		in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: &openapi3filter.Options{
			ExcludeRequestBody:  !jsonBody || len(bytes.TrimSpace(body)) == 0 || !json.Valid(body),
			SkipSettingDefaults: true,
		}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			writeError(w, r, validationError(r, err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

const jsonType = "application/json"

var patternParam = regexp.MustCompile(`\{([^}]+)\}`)

// validationError says what the validator refused, naming the parameter
// or the body's field (a JSON path such as network.allow.0), in the words
// the handlers use: "x is required", "unknown field \"x\"", "field \"x\"
// must be ...".
func validationError(r *http.Request, err error) error {
	var req *openapi3filter.RequestError
	if !errors.As(err, &req) {
		return errdefs.New(errdefs.ErrInvalidArgument, "%v", err)
	}
	var sch *openapi3.SchemaError
	isSchema := errors.As(req.Err, &sch)
	if p := req.Parameter; p != nil {
		value := paramValue(r, p.Name)
		switch {
		case !isSchema || sch.SchemaField == "type":
			// It did not parse as its type (a boolean, an integer).
			what := "not valid"
			if p.Schema != nil && p.Schema.Value != nil {
				what = describeSchema(p.Schema.Value)
			}
			return errdefs.New(errdefs.ErrInvalidArgument, "%s %q is %s", p.Name, value, what)
		case sch.SchemaField == "pattern":
			return errdefs.New(errdefs.ErrInvalidArgument, "%s %q does not match %s", p.Name, value, sch.Schema.Pattern)
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "%s %q %s", p.Name, value, schemaReason(sch))
	}
	if !isSchema {
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", req.Error())
	}
	field := strings.Join(sch.JSONPointer(), ".")
	switch {
	case sch.SchemaField == "required":
		return errdefs.New(errdefs.ErrInvalidArgument, "%s is required", field)
	case strings.HasSuffix(sch.Reason, " is unsupported"):
		name := strings.TrimSuffix(strings.TrimPrefix(sch.Reason, "property "), " is unsupported")
		if field != "" {
			name = field + "." + strings.Trim(name, `"`)
			return errdefs.New(errdefs.ErrInvalidArgument, "unknown field %q", name)
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "unknown field %s", name)
	}
	if field == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "request body %s", schemaReason(sch))
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "field %q %s", field, schemaReason(sch))
}

// schemaReason words a schema's refusal for an error message.
func schemaReason(e *openapi3.SchemaError) string {
	switch e.SchemaField {
	case "type":
		return fmt.Sprintf("must be %s, not %s", describeType(e.Schema), jsonKind(e.Value))
	case "minimum":
		if e.Schema != nil && e.Schema.Min != nil && *e.Schema.Min == 0 {
			return "must not be negative"
		}
	case "enum":
		if e.Schema != nil {
			var vs []string
			for _, v := range e.Schema.Enum {
				vs = append(vs, fmt.Sprint(v))
			}
			return "must be one of " + strings.Join(vs, ", ")
		}
	}
	return strings.TrimPrefix(strings.TrimPrefix(e.Reason, "value "), "number ")
}

// describeType names what a schema's type wants ("an integer").
func describeType(s *openapi3.Schema) string {
	if s == nil || s.Type == nil || len(s.Type.Slice()) == 0 {
		return "valid"
	}
	switch t := s.Type.Slice()[0]; t {
	case openapi3.TypeInteger, openapi3.TypeArray, openapi3.TypeObject:
		return "an " + t
	default:
		return "a " + t
	}
}

// jsonKind names a decoded JSON value's type as JSON does.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number, int, int64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
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
		value := paramValue(r, name)
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

// paramValue answers the value of the parameter name as the request
// sent it (path, query or header).
func paramValue(r *http.Request, name string) string {
	if v := r.PathValue(name); v != "" {
		return v
	}
	if v := r.URL.Query().Get(name); v != "" {
		return v
	}
	return r.Header.Get(name)
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
	return describeSchema(p.Schema.Value)
}

// describeSchema says that a parameter's value is not what its schema
// wants: "neither true nor false", "not an integer".
func describeSchema(s *openapi3.Schema) string {
	if s.Type == nil {
		return "not valid"
	}
	switch t := s.Type; {
	case t.Is(openapi3.TypeBoolean):
		return "neither true nor false"
	case t.Is(openapi3.TypeInteger):
		return "not an integer"
	case t.Is(openapi3.TypeNumber):
		return "not a number"
	}
	return "not valid"
}
