// Package openapicheck validates HTTP requests against an operation of an
// OpenAPI spec (kin-openapi's openapi3filter) before a handler reads them,
// and words what it refuses as a 400 naming the parameter or the body's
// field. The native API (api/openapi.yaml) and the E2B layer (E2B's own
// spec) both use it.
package openapicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Route is where an operation of the spec is served.
type Route struct {
	Spec   *openapi3.T
	Method string
	// Path is the spec's path ("/sandboxes/{sandboxID}").
	Path string
	// Params are the names the router binds the path's parameters under,
	// in the order of the spec path's ("id" for {sandboxID}); nil: the
	// spec's own names.
	Params []string
	// MaxBody bounds a JSON body read for validation.
	MaxBody int64
	// Fail answers a refused request.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
}

// Operation answers the spec's operation for method and path, nil for
// none.
func Operation(spec *openapi3.T, method, path string) *openapi3.Operation {
	item := spec.Paths.Value(path)
	if item == nil {
		return nil
	}
	return item.GetOperation(method)
}

// PathParams are the names of a spec path's parameters, in order.
func PathParams(path string) []string {
	var names []string
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		names = append(names, m[1])
	}
	return names
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// JSONType is the media type of the bodies that are validated.
const JSONType = "application/json"

// Validate checks a request against the route's operation before next
// reads it: path and query parameters (types, enums, ranges) and JSON
// bodies (required fields, types, enums, ranges, and no field the schema
// does not name where it says additionalProperties: false). A request that
// fails is answered by rt.Fail with an invalid_argument error naming the
// parameter or field. Bodies that are not JSON (uploads) are streamed to
// the handler unread; a JSON body that does not parse is left to the
// handler's decoder, which says where it breaks. Defaults are not filled
// in: a field left out stays left out.
func Validate(rt Route, next http.Handler) http.Handler {
	op := Operation(rt.Spec, rt.Method, rt.Path)
	if op == nil {
		return next
	}
	// The caller has authenticated the request already. The validator's
	// own security step would read the whole body into memory to hand it
	// to an authentication function (kin-openapi does), which for an
	// upload streamed to a sandbox is gigabytes: the route it checks has
	// no security requirements.
	unsecured := *op
	unsecured.Security = &openapi3.SecurityRequirements{}
	route := &routers.Route{Spec: rt.Spec, Path: rt.Path, PathItem: rt.Spec.Paths.Value(rt.Path), Method: rt.Method, Operation: &unsecured}
	names := PathParams(rt.Path)
	bound := rt.Params
	if bound == nil {
		bound = names
	}
	jsonBody := op.RequestBody != nil && op.RequestBody.Value != nil && op.RequestBody.Value.Content.Get(JSONType) != nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		params := make(map[string]string, len(names))
		for i, n := range names {
			if i < len(bound) {
				params[n] = r.PathValue(bound[i])
			}
		}
		// What the validator sees: never the body of a stream (an upload
		// goes to its handler unread).
		check := r.Clone(r.Context())
		check.Body = http.NoBody
		body := []byte(nil)
		if jsonBody {
			var err error
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, rt.MaxBody))
			if err != nil {
				var tooLarge *http.MaxBytesError
				if errors.As(err, &tooLarge) {
					err = errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
				}
				rt.Fail(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			// The content type is not checked (clients that send none
			// were always served): the body is validated as the JSON the
			// handler decodes it as.
			check.Header.Set("Content-Type", JSONType)
			check.Body = io.NopCloser(bytes.NewReader(body))
		}
		in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: &openapi3filter.Options{
			ExcludeRequestBody:  !jsonBody || len(bytes.TrimSpace(body)) == 0 || !json.Valid(body),
			SkipSettingDefaults: true,
		}}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			rt.Fail(w, r, Refusal(r, err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Refusal says what the validator refused, naming the parameter
// or the body's field (a JSON path such as network.allow.0), in the words
// the handlers use: "x is required", "unknown field \"x\"", "field \"x\"
// must be ...".
func Refusal(r *http.Request, err error) error {
	var req *openapi3filter.RequestError
	if !errors.As(err, &req) {
		return errdefs.New(errdefs.ErrInvalidArgument, "%v", err)
	}
	var sch *openapi3.SchemaError
	isSchema := errors.As(req.Err, &sch)
	if p := req.Parameter; p != nil {
		value := ParamValue(r, p.Name)
		switch {
		case !isSchema || sch.SchemaField == "type":
			// It did not parse as its type (a boolean, an integer).
			what := "not valid"
			if p.Schema != nil && p.Schema.Value != nil {
				what = DescribeSchema(p.Schema.Value)
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

// ParamValue answers the value of the parameter name as the request
// sent it (path, query or header).
func ParamValue(r *http.Request, name string) string {
	if v := r.PathValue(name); v != "" {
		return v
	}
	if v := r.URL.Query().Get(name); v != "" {
		return v
	}
	return r.Header.Get(name)
}

// DescribeSchema says that a parameter's value is not what its schema
// wants: "neither true nor false", "not an integer".
func DescribeSchema(s *openapi3.Schema) string {
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
